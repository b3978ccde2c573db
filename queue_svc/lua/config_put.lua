-- Mirror an event's stored configuration for the scripts, unless the
-- mirror already holds this version or a newer one (writes may arrive out
-- of order).
--
-- The room's generation marker (KEYS 2) is written here only when it is
-- missing and the caller says nothing needs rebuilding (ARGV 2 > 0: a new
-- room, or one whose Postgres copy holds nothing yet). A room that lost
-- its data and has a history keeps no marker until the admitter rebuilt it
-- (queue_svc.rebuild): its joins and reads wait for that.
--
-- KEYS: 1 config, 2 generation marker
-- ARGV: 1 version, 2 the generation to mark a missing marker with (0: leave
--       it missing), then field, value pairs
-- Reply: 1 written, 0 already as new
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[2], ARGV[2], 'NX')
end
local current = tonumber(redis.call('HGET', KEYS[1], 'ver') or '0')
if current >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'ver', ARGV[1], unpack(ARGV, 3))
return 1
