-- A generic cell rate limit (GCRA) on one key: at most `burst` requests at
-- once, refilled at one per `interval_ms`. The key holds the theoretical
-- arrival time of the next request (ms) and expires when it is in the past.
-- KEYS[1]  the limit's key
-- ARGV[1]  now (ms)   ARGV[2] interval_ms   ARGV[3] burst
-- Returns {1, 0} when allowed, {0, retry_after_ms} when refused.
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then
  tat = now
end
local next_tat = tat + interval
local over = next_tat - now - burst * interval
if over > 0 then
  return {0, math.ceil(over)}
end
redis.call('SET', KEYS[1], next_tat, 'PX', math.ceil(next_tat - now) + 1)
return {1, 0}
