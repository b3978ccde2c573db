-- A stream lets go of its slot (edge_svc/lua/slot.lua).
-- KEYS[1]  the subject's set   ARGV[1] stream id
return redis.call('ZREM', KEYS[1], ARGV[1])
