-- Mirror an event's stored configuration for the scripts, unless the
-- mirror already holds this version or a newer one (writes may arrive out
-- of order).
--
-- KEYS: 1 config
-- ARGV: 1 version, then field, value pairs
-- Reply: 1 written, 0 already as new
local current = tonumber(redis.call('HGET', KEYS[1], 'ver') or '0')
if current >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'ver', ARGV[1], unpack(ARGV, 2))
return 1
