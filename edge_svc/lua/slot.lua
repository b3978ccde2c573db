-- One of at most `limit` open streams of a subject (an address, an
-- account), across every edge process: a sorted set of stream ids scored by
-- their lease's end. Leases that ended (a process gone without letting go)
-- are dropped first; a stream already holding a slot renews it.
-- KEYS[1]  the subject's set
-- ARGV[1]  now (ms)   ARGV[2] lease (ms)   ARGV[3] limit   ARGV[4] stream id
-- Returns 1 when the stream holds a slot, 0 when all are taken.
local now = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[4]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[4])
redis.call('PEXPIRE', KEYS[1], lease)
return 1
