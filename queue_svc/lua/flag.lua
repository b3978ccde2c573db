-- FlagCustomer: an operator puts a fan in the shadow lane (flagged) or
-- takes them out. A flagged fan keeps joining, waiting and reading a
-- normal wait but is never admitted (see the admit script); a fan who is
-- already admitted or shopping keeps that (revoke them to end it).
-- Unflagging a fan whom admission already passed puts them back in the
-- queue at their own score: at the head, admitted by the next tick.
--
-- Each change is appended to the lifecycle log (KEYS 6), so that the
-- flags survive Redis losing its data (queue_svc.rebuild): a flag (F), an
-- unflag of a fan still waiting (G), a fan put back in the queue (U).
--
-- KEYS: 1 config, 2 queue, 3 shadow (flagged), 4 shadow queue, 5 seen,
--       6 lifecycle log
-- ARGV: 1 customer, 2 flagged (1/0), 3 now (ms)
-- Reply: {exists, changed}
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, 0}
end
local customer = ARGV[1]
if ARGV[2] == '1' then
  local added = redis.call('SADD', KEYS[3], customer)
  if added == 1 then
    redis.call('RPUSH', KEYS[6], 'F\t' .. ARGV[3] .. '\t' .. customer)
  end
  return {1, added}
end
local changed = redis.call('SREM', KEYS[3], customer)
local score = redis.call('ZSCORE', KEYS[4], customer)
if score then
  redis.call('ZREM', KEYS[4], customer)
  redis.call('ZADD', KEYS[2], score, customer)
  redis.call('ZADD', KEYS[5], ARGV[3], customer)
  redis.call('RPUSH', KEYS[6], 'U\t' .. ARGV[3] .. '\t' .. customer)
elseif changed == 1 then
  redis.call('RPUSH', KEYS[6], 'G\t' .. ARGV[3] .. '\t' .. customer)
end
return {1, changed}
