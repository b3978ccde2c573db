-- An event's admission progress in one read: what every watcher of the
-- event in one process is told, whatever their number.
--
-- KEYS: 1 config, 2 queue, 3 admitted (unclaimed), 4 active, 5 outcomes,
--       6 progress, 7 seen, 8 shadow, 9 shadow queue, 10 the room's
--       generation marker
-- Reply: {exists, admitted_through, queue_length, active, admitted_total,
--         joined_total, pre_joined, rate (string), last_tick, opens_at,
--         paused (1 paused, +2 when sold out: the admit script's flag),
--         target rate (string), target reason, generation (0: the room lost
--         its data and is not rebuilt yet)}
local cfg = redis.call('HMGET', KEYS[1], 'opens', 'paused', 'rate', 'soldout')
if not cfg[1] then
  return {0}
end
local prog = redis.call('HMGET', KEYS[6], 'through', 'admitted', 'joined', 'pre', 'rate', 'last', 'target', 'why')
return {1, tonumber(prog[1] or '0'), redis.call('ZCARD', KEYS[2]),
        redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[4]),
        tonumber(prog[2] or '0'), tonumber(prog[3] or '0'), tonumber(prog[4] or '0'),
        prog[5] or '0', tonumber(prog[6] or '0'), tonumber(cfg[1]),
        tonumber(cfg[2]) + (cfg[4] == '1' and 2 or 0),
        prog[7] or cfg[3], tonumber(prog[8] or '0'), tonumber(redis.call('GET', KEYS[10]) or '0')}
