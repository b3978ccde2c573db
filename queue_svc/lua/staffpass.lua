-- A staff pass is bound to the first account that joins with it:
-- later joins of that account pass, another account's are refused.
-- Postgres decides whose a pass is (queue_svc.adapters.pg_staff_passes);
-- this key answers the joins that follow, and is put right (ARGV 3 = 1:
-- overwrite) when it disagrees with Postgres, e.g. after Redis lost it.
-- KEYS[1]  the pass's key ({ev:<id>}:staffpass:<pass id>)
-- ARGV[1]  the customer   ARGV[2] how long to keep the binding (ms, the pass's life left)
-- ARGV[3]  1 to overwrite the binding (optional)
-- Returns 1 when the pass is (now) this customer's, 0 when another's.
local keep = math.max(1, tonumber(ARGV[2]))
if ARGV[3] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', keep)
  return 1
end
local bound = redis.call('GET', KEYS[1])
if bound then
  return bound == ARGV[1] and 1 or 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', keep)
return 1
