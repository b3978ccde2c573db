-- The writes of a room's rebuild after Redis lost its data (see
-- queue_svc.rebuild): every write is refused once the room's generation
-- marker (KEYS 1) exists again, so a rebuild that lost a race to another
-- admitter's (or came after it) changes nothing.
--
-- ARGV 1 is the operation:
--   state  KEYS 2 queue, 3 admitted, 4 active, 5 sequence, 6 progress (the
--          general lane's): reply {marker (0 none), holds state (1/0)}
--   zadd   KEYS 2 a sorted set; ARGV score, member pairs (ZADD NX)
--   hset   KEYS 2 a hash; ARGV field, value pairs
--   sadd   KEYS 2 a set; ARGV members
--   rpush  KEYS 2 a list; ARGV entries
--   seq    KEYS 2 a sequence; ARGV 2 its least value
--   wipe   KEYS 2... the keys to delete (a stale room's), done even with a
--          marker: the marker itself is among them
--   mark   ARGV 2 the generation (a marker is never lowered); KEYS 2 the
--          refusal counters, ARGV 3... reason, count pairs added to them
--          when this call writes the marker (so once per generation)
-- Reply (but state): 1 done, 0 refused (the marker exists)
local op = ARGV[1]
local marker = tonumber(redis.call('GET', KEYS[1]) or '0')
if op == 'state' then
  local held = redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[4], KEYS[5]) > 0
    or redis.call('HEXISTS', KEYS[6], 'last') == 1
  return {marker, held and 1 or 0}
end
if op == 'wipe' then
  redis.call('DEL', unpack(KEYS))
  return 1
end
if op == 'mark' then
  if marker < tonumber(ARGV[2]) then
    redis.call('SET', KEYS[1], ARGV[2])
    for i = 3, #ARGV, 2 do
      redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1])
    end
  end
  return 1
end
if marker > 0 then
  return 0
end
if op == 'zadd' then
  redis.call('ZADD', KEYS[2], 'NX', unpack(ARGV, 2))
elseif op == 'hset' then
  redis.call('HSET', KEYS[2], unpack(ARGV, 2))
elseif op == 'sadd' then
  redis.call('SADD', KEYS[2], unpack(ARGV, 2))
elseif op == 'rpush' then
  redis.call('RPUSH', KEYS[2], unpack(ARGV, 2))
elseif op == 'seq' then
  local current = tonumber(redis.call('GET', KEYS[2]) or '0')
  if current < tonumber(ARGV[2]) then
    redis.call('SET', KEYS[2], ARGV[2])
  end
end
return 1
