-- Which lane of an event a fan is in. A fan is in one lane at a time: the
-- lane hash binds the fan to a lane other than the general one (no entry:
-- the general lane). A join or a fan call made in another lane than the
-- bound one is answered "bound elsewhere" by its script, and the store asks
-- here: a fan still waiting or admitted in their bound lane stays there
-- (the answer is that lane, whose place the store then answers); a fan who
-- is not (left, dropped, expired, done) is bound to the lane they ask for.
--
-- KEYS: 1 lane hash, 2 admitted (unclaimed), 3 active, 4 shadow queue,
--       5 the queue of the lane the fan is bound to (ARGV 3)
-- ARGV: 1 customer, 2 the lane asked for ('' general), 3 the bound lane as
--       the caller last saw it ('' general)
-- Reply: the lane to use ('' general)
local customer = ARGV[1]
local want = ARGV[2]
local bound = redis.call('HGET', KEYS[1], customer) or ''
if bound ~= ARGV[3] then
  -- Moved since the caller looked: the caller tries again in that lane.
  return bound
end
if bound == want then
  return want
end
local live = redis.call('ZSCORE', KEYS[5], customer) or redis.call('ZSCORE', KEYS[2], customer)
  or redis.call('ZSCORE', KEYS[3], customer) or redis.call('ZSCORE', KEYS[4], customer)
if live then
  return bound
end
if want == '' then
  redis.call('HDEL', KEYS[1], customer)
else
  redis.call('HSET', KEYS[1], customer, want)
end
return want
