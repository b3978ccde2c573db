-- One fan's place, and the changes a fan makes to it:
--   look   read the place
--   claim  read it; an unclaimed admission becomes a session that ends
--          session-length from now (the first token is being issued)
--   leave  a waiting fan leaves the queue
--   end    an admitted fan ends the session (completed or abandoned)
-- An admission or session whose time is up is recorded as expired here,
-- as the next admit tick would do.
--
-- KEYS: 1 config, 2 queue, 3 admitted (unclaimed), 4 active, 5 outcomes,
--       6 progress
-- ARGV: 1 customer, 2 now (ms), 3 op
-- Reply: {state, score, ahead, expires_at, changed, opens_at, paused,
--         token_ttl, rate (string), last_tick, admitted_total, pre_joined}
--   state 1 waiting, 2 admitted, 3 expired, 4 left, 5 completed,
--   6 not in queue; -1 unknown event. changed is 1 when op did its change.
local cfg = redis.call('HMGET', KEYS[1], 'opens', 'paused', 'session', 'ttl')
if not cfg[1] then
  return {-1}
end
local customer = ARGV[1]
local now = tonumber(ARGV[2])
local op = ARGV[3]
local prog = redis.call('HMGET', KEYS[6], 'rate', 'last', 'admitted', 'pre')

local function reply(state, score, ahead, expires, changed)
  return {state, score, ahead, expires, changed, tonumber(cfg[1]), tonumber(cfg[2]), tonumber(cfg[4]),
          prog[1] or '0', tonumber(prog[2] or '0'), tonumber(prog[3] or '0'), tonumber(prog[4] or '0')}
end

local function finish(key, outcome)
  redis.call('ZREM', KEYS[key], customer)
  redis.call('HSET', KEYS[5], customer, outcome)
end

local score = redis.call('ZSCORE', KEYS[2], customer)
if score then
  if op == 'leave' then
    finish(2, 'L')
    return reply(4, 0, 0, 0, 1)
  end
  return reply(1, tonumber(score), redis.call('ZRANK', KEYS[2], customer), 0, 0)
end

local claim_by = redis.call('ZSCORE', KEYS[3], customer)
if claim_by then
  claim_by = tonumber(claim_by)
  if claim_by <= now then
    finish(3, 'E')
    return reply(3, 0, 0, 0, 0)
  end
  if op == 'claim' then
    local ends = now + tonumber(cfg[3])
    redis.call('ZREM', KEYS[3], customer)
    redis.call('ZADD', KEYS[4], ends, customer)
    return reply(2, 0, 0, ends, 1)
  end
  if op == 'end' then
    finish(3, 'C')
    return reply(5, 0, 0, 0, 1)
  end
  return reply(2, 0, 0, claim_by, 0)
end

local ends = redis.call('ZSCORE', KEYS[4], customer)
if ends then
  ends = tonumber(ends)
  if ends <= now then
    finish(4, 'E')
    return reply(3, 0, 0, 0, 0)
  end
  if op == 'end' then
    finish(4, 'C')
    return reply(5, 0, 0, 0, 1)
  end
  return reply(2, 0, 0, ends, 0)
end

local outcome = redis.call('HGET', KEYS[5], customer)
if outcome == 'E' then
  return reply(3, 0, 0, 0, 0)
elseif outcome == 'L' then
  return reply(4, 0, 0, 0, 0)
elseif outcome == 'C' then
  return reply(5, 0, 0, 0, 0)
end
return reply(6, 0, 0, 0, 0)
