-- The draw recorder's read of an event's pre-queue log (the placements
-- the join script appends, "<pseudonym> <score>" each), and the seal: with
-- ARGV 3 = 1 the pre-queue is closed first (progress field `sealed`), so
-- that no join places anyone in it again and the log is final.
--
-- A room that lost its data and is not rebuilt yet (no generation marker,
-- KEYS 4) is neither read nor sealed: its log comes back with the rebuild
-- (queue_svc.rebuild), as long as the copy in Postgres covered.
--
-- KEYS: 1 config, 2 progress, 3 pre-queue log, 4 generation marker
-- ARGV: 1 first entry (0-based), 2 most entries, 3 seal (1) or not (0)
-- Reply: {1, log length, sealed (0/1), entries...}, or {-1} for an
--        unknown event, {-2} for a room not rebuilt yet
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
if redis.call('EXISTS', KEYS[4]) == 0 then
  return {-2}
end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[2], 'sealed', 1)
end
local sealed = 0
if redis.call('HEXISTS', KEYS[2], 'sealed') == 1 then
  sealed = 1
end
local first = tonumber(ARGV[1])
local most = tonumber(ARGV[2])
local reply = {1, redis.call('LLEN', KEYS[3]), sealed}
if most > 0 then
  local entries = redis.call('LRANGE', KEYS[3], first, first + most - 1)
  for i = 1, #entries do
    reply[#reply + 1] = entries[i]
  end
end
return reply
