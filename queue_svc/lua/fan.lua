-- One fan's place, and the changes a fan makes to it:
--   look   read the place
--   claim  read it; an unclaimed admission becomes a session that ends
--          session-length from now (the first token is being issued)
--   leave  a waiting fan leaves the queue
--   end    an admitted fan ends the session (completed or abandoned)
-- An admission or session whose time is up is recorded as expired here,
-- as the next admit tick would do. Reading a waiting fan's place (look,
-- claim) counts as seeing them (the seen set, see the admit script).
--
-- A flagged fan in the shadow queue reads as waiting (the fans still
-- queued ahead of their score ahead of them) and may leave.
--
-- Each change is appended to the event's lifecycle log (KEYS 10; see
-- queue_svc.jobs.lifecycle), with the end's reason (ARGV 4) for an ended session.
--
-- KEYS: 1 config, 2 queue, 3 admitted (unclaimed), 4 active, 5 outcomes,
--       6 progress, 7 seen, 8 shadow (flagged), 9 shadow queue,
--       10 lifecycle log, 11 lane hash (see lane.lua), 12 the room's
--       generation marker (see queue_svc.rebuild)
-- ARGV: 1 customer, 2 now (ms), 3 op, 4 why the session ends (op end;
--       '' = not said), 5 the lane these keys are of ('' general)
-- Reply: {state, score, ahead, expires_at, changed, opens_at,
--         paused (1 paused, +2 when sold out: the admit script's flag),
--         token_ttl, rate (string), last_tick, admitted_total, pre_joined}
--   state 1 waiting, 2 admitted, 3 expired, 4 left, 5 completed,
--   6 not in queue, 7 dropped (not seen for the presence grace); -1
--   unknown event, -8 the room lost its data and is not rebuilt yet
--   (nothing changed: the fan's place comes back with the rebuild). changed is 1 when op did its change. {-7, lane} when
--   the room has lanes and the fan is bound to another (nothing changed).
local cfg = redis.call('HMGET', KEYS[1], 'opens', 'paused', 'session', 'ttl', 'lanes', 'soldout')
if not cfg[1] then
  return {-1}
end
if redis.call('EXISTS', KEYS[12]) == 0 then
  return {-8}
end
local customer = ARGV[1]
if cfg[5] == '1' then
  local bound = redis.call('HGET', KEYS[11], customer) or ''
  if bound ~= (ARGV[5] or '') then
    return {-7, bound}
  end
end
local now = tonumber(ARGV[2])
local op = ARGV[3]
local prog = redis.call('HMGET', KEYS[6], 'rate', 'last', 'admitted', 'pre')

local function reply(state, score, ahead, expires, changed)
  return {state, score, ahead, expires, changed, tonumber(cfg[1]),
          tonumber(cfg[2]) + (cfg[6] == '1' and 2 or 0), tonumber(cfg[4]),
          prog[1] or '0', tonumber(prog[2] or '0'), tonumber(prog[3] or '0'), tonumber(prog[4] or '0')}
end

local function finish(key, outcome)
  redis.call('ZREM', KEYS[key], customer)
  redis.call('HSET', KEYS[5], customer, outcome)
end

local function log(kind, extra)
  local entry = kind .. '\t' .. ARGV[2] .. '\t' .. customer
  if extra then
    entry = entry .. '\t' .. extra
  end
  redis.call('RPUSH', KEYS[10], entry)
end

local score = redis.call('ZSCORE', KEYS[2], customer)
if score then
  if op == 'leave' then
    finish(2, 'L')
    redis.call('ZREM', KEYS[7], customer)
    log('L')
    return reply(4, 0, 0, 0, 1)
  end
  if op ~= 'end' then
    redis.call('ZADD', KEYS[7], now, customer)
  end
  return reply(1, tonumber(score), redis.call('ZRANK', KEYS[2], customer), 0, 0)
end

local shadowed = redis.call('ZSCORE', KEYS[9], customer)
if shadowed then
  if op == 'leave' then
    finish(9, 'L')
    log('L')
    return reply(4, 0, 0, 0, 1)
  end
  return reply(1, tonumber(shadowed), redis.call('ZCOUNT', KEYS[2], '-inf', '(' .. shadowed), 0, 0)
end

-- Admitted: unclaimed (3, until the claim deadline) or shopping (4, until
-- the session's end).
for key = 3, 4 do
  local ends = redis.call('ZSCORE', KEYS[key], customer)
  if ends then
    ends = tonumber(ends)
    if ends <= now then
      finish(key, 'E')
      if key == 3 then
        redis.call('HINCRBY', KEYS[6], 'noshow', 1)
        log('N')
      else
        log('X')
      end
      return reply(3, 0, 0, 0, 0)
    end
    if op == 'claim' and key == 3 then
      local session_ends = now + tonumber(cfg[3])
      redis.call('ZREM', KEYS[3], customer)
      redis.call('ZADD', KEYS[4], session_ends, customer)
      redis.call('HINCRBY', KEYS[6], 'claimed', 1)
      log('C')
      return reply(2, 0, 0, session_ends, 1)
    end
    if op == 'end' then
      finish(key, 'C')
      log('E', ARGV[4] or '')
      return reply(5, 0, 0, 0, 1)
    end
    return reply(2, 0, 0, ends, 0)
  end
end

-- Not queued nor admitted: how the last visit ended, if it did.
local ended = {E = 3, L = 4, C = 5, D = 7}
return reply(ended[redis.call('HGET', KEYS[5], customer)] or 6, 0, 0, 0, 0)
