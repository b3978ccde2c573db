-- JoinQueue in one round trip. Counts the call against the per-account and
-- per-client limits of the current window; returns the existing place of a
-- fan who is queued or admitted (a queued fan is seen again: see the seen
-- set); else queues the fan: before opening at a uniformly random score of
-- the pre-queue band (drawn by the caller), after it at the back (the
-- event's sequence above the band).
--
-- Safety net: when the room has it on, admission is open, nobody waits,
-- a slot is free and the admission rate allows one more, a new arrival is
-- admitted here at once (unclaimed, with its claim deadline) instead of
-- at the next tick. The cap and the rate are read and applied inside this
-- script, as in the admit script, so joins and admitters together never
-- exceed either. The progress moves exactly as an admit tick moves it
-- (admitted total, admitted-through score); the rate allowance is the one
-- the admit script keeps (carry at the last tick, see admit.lua): what a
-- join takes here the next tick does not hand out again.
--
-- A fan an operator flagged (shadow set) and whom admission already
-- reached waits in the shadow queue: their join answers that place as a
-- normal wait, and the safety net never admits a flagged fan.
--
-- Pre-queue placements are the draw's (boxoffice.draw): the caller gives
-- the fan's pseudonym and its score; a placement appends "<pseudonym>
-- <score>" to the event's log of placements, which the draw recorder copies
-- to Postgres. Once the recorder sealed the pre-queue (progress field
-- `sealed`, at opening) nobody is placed in it again, even if the opening
-- moves later: the seed is public from then on.
--
-- Each change of a fan's state is appended to the event's lifecycle log
-- (KEYS 13, see queue_svc.jobs.lifecycle for the entries' form), which the
-- lifecycle recorder copies to Postgres; a refused join counts in the
-- event's refusal counters (KEYS 14, field the reason).
--
-- KEYS: 1 config, 2 queue, 3 admitted (unclaimed), 4 active, 5 outcomes,
--       6 progress, 7 seen, 8 shadow (flagged), 9 shadow queue,
--       10 sequence, 11 this window's join counters, 12 pre-queue log,
--       13 lifecycle log, 14 refusal counters, 15 lane hash (see lane.lua),
--       16 the room's generation marker (see queue_svc.rebuild)
-- ARGV: 1 customer, 2 now (ms), 3 pre-queue score (negative: none; a fan
--       who would be placed in the pre-queue is not, code -6), 4 client ('' = none),
--       5 joins per account per window, 6 joins per client per window
--       (0 = no limit), 7 window (ms), 8 pre-queue band, 9 pseudonym
--       ('' = none: the placement is not logged), 10 the lane these keys
--       are of ('' general)
-- Reply: {code, score, ahead, newly_joined, opens_at, paused (1 paused, +2
--         when sold out: the admit script's flag), admitted_total,
--         rate (string), last_tick}; {-7, lane} when the room has lanes and
--         the fan is bound to another lane (nothing changed: lane.lua decides)
--   code 1 waiting, 2 admitted; -1 unknown event, -2 not open yet,
--   -3 account over its limit, -4 client over its limit, -6 the pre-queue
--   score is needed (nothing changed but the join's count in the limits),
--   -8 the room lost its data and is not rebuilt yet (nothing changed: a
--   join now would take a place ahead of the fans the rebuild puts back)
local cfg = redis.call('HMGET', KEYS[1], 'opens', 'pre', 'paused', 'safety', 'max', 'claim', 'rate', 'lanes',
                      'soldout')
if not cfg[1] then
  return {-1}
end
if redis.call('EXISTS', KEYS[16]) == 0 then
  return {-8}
end
local customer = ARGV[1]
-- A lane's joins say their lane in the lifecycle log (the general lane's say nothing).
local in_lane = ''
if ARGV[10] and ARGV[10] ~= '' then
  in_lane = '\t' .. ARGV[10]
end
if cfg[8] == '1' then
  local bound = redis.call('HGET', KEYS[15], customer) or ''
  if bound ~= ARGV[10] then
    return {-7, bound}
  end
end
local now = tonumber(ARGV[2])
local opens = tonumber(cfg[1])
local paused = tonumber(cfg[3])
if cfg[9] == '1' then
  paused = paused + 2
end
local prog = redis.call('HMGET', KEYS[6], 'admitted', 'rate', 'last', 'sealed')
local admitted_total = tonumber(prog[1] or '0')
local rate = prog[2] or '0'
local last_tick = tonumber(prog[3] or '0')

local account_limit = tonumber(ARGV[5])
local client_limit = tonumber(ARGV[6])
local client = ARGV[4]
if client == '' then
  client_limit = 0
end
if account_limit > 0 or client_limit > 0 then
  local fresh = redis.call('EXISTS', KEYS[11]) == 0
  local over = 0
  if account_limit > 0 and redis.call('HINCRBY', KEYS[11], 'a:' .. customer, 1) > account_limit then
    over = -3
  end
  if client_limit > 0 and redis.call('HINCRBY', KEYS[11], 'c:' .. client, 1) > client_limit and over == 0 then
    over = -4
  end
  if fresh then
    redis.call('PEXPIRE', KEYS[11], 2 * tonumber(ARGV[7]))
  end
  if over ~= 0 then
    if over == -3 then
      redis.call('HINCRBY', KEYS[14], 'account_limit', 1)
    else
      redis.call('HINCRBY', KEYS[14], 'client_limit', 1)
    end
    return {over, 0, 0, 0, opens, paused, admitted_total, rate, last_tick}
  end
end

local score = redis.call('ZSCORE', KEYS[2], customer)
if score then
  redis.call('ZADD', KEYS[7], now, customer)
  return {1, tonumber(score), redis.call('ZRANK', KEYS[2], customer), 0, opens, paused, admitted_total, rate, last_tick}
end
local shadowed = redis.call('ZSCORE', KEYS[9], customer)
if shadowed then
  local ahead = redis.call('ZCOUNT', KEYS[2], '-inf', '(' .. shadowed)
  return {1, tonumber(shadowed), ahead, 0, opens, paused, admitted_total, rate, last_tick}
end

-- Admitted and still within the claim window or the session: admitted.
-- Past it: expired (as the next admit tick would record), and joins anew.
for key = 3, 4 do
  local ends = redis.call('ZSCORE', KEYS[key], customer)
  if ends then
    if tonumber(ends) > now then
      return {2, 0, 0, 0, opens, paused, admitted_total, rate, last_tick}
    end
    redis.call('ZREM', KEYS[key], customer)
    if key == 3 then
      redis.call('HINCRBY', KEYS[6], 'noshow', 1)
      redis.call('RPUSH', KEYS[13], 'N\t' .. ARGV[2] .. '\t' .. customer)
    else
      redis.call('RPUSH', KEYS[13], 'X\t' .. ARGV[2] .. '\t' .. customer)
    end
  end
end

if now < tonumber(cfg[2]) then
  redis.call('HINCRBY', KEYS[14], 'not_open', 1)
  return {-2, 0, 0, 0, opens, paused, admitted_total, rate, last_tick}
end

-- Admitted at once (the safety net), when everything above allows it.
local function admit_at_once()
  if cfg[4] ~= '1' or paused ~= 0 or now < opens then
    return false
  end
  if redis.call('SISMEMBER', KEYS[8], customer) == 1 then
    return false
  end
  if redis.call('ZCARD', KEYS[2]) > 0 then
    return false
  end
  if redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[4]) >= tonumber(cfg[5]) then
    return false
  end
  local tick = redis.call('HMGET', KEYS[6], 'carry', 'target')
  local per_second = tonumber(tick[2] or '0')
  if per_second <= 0 then
    per_second = tonumber(cfg[7])
  end
  -- The allowance the next tick would compute now (admit.lua), of which
  -- this admission takes one; the carry left is what makes the next tick's
  -- computation come out one lower.
  local accrued = 0
  if last_tick > 0 and now > last_tick then
    accrued = per_second * (now - last_tick) / 1000
  end
  -- Before any tick, the bank starts with one second's worth.
  local allowance = math.min(per_second, tonumber(tick[1] or per_second) + accrued)
  if allowance < 1 then
    return false
  end
  redis.call('HSET', KEYS[6], 'carry', allowance - 1 - accrued)
  return true
end

if now < opens and admitted_total == 0 and not prog[4] then
  -- Pre-queue until the opening, unless admission already began or the
  -- pre-queue is sealed (the opening was moved later): then arrivals go to
  -- the back like everyone else.
  score = tonumber(ARGV[3])
  if score < 0 then
    return {-6, 0, 0, 0, opens, paused, admitted_total, rate, last_tick}
  end
  redis.call('HINCRBY', KEYS[6], 'pre', 1)
  if ARGV[9] ~= '' then
    redis.call('RPUSH', KEYS[12], ARGV[9] .. ' ' .. ARGV[3])
  end
  redis.call('RPUSH', KEYS[13], 'J\t' .. ARGV[2] .. '\t' .. customer .. '\t' .. ARGV[3] .. '\t1' .. in_lane)
elseif admit_at_once() then
  score = tonumber(ARGV[8]) + redis.call('INCR', KEYS[10])
  redis.call('ZADD', KEYS[3], now + tonumber(cfg[6]), customer)
  redis.call('HDEL', KEYS[5], customer)
  redis.call('HINCRBY', KEYS[6], 'joined', 1)
  admitted_total = redis.call('HINCRBY', KEYS[6], 'admitted', 1)
  local through = tonumber(redis.call('HGET', KEYS[6], 'through') or '0')
  redis.call('HSET', KEYS[6], 'through', math.max(through, score))
  redis.call('RPUSH', KEYS[13], 'J\t' .. ARGV[2] .. '\t' .. customer .. '\t' .. string.format('%d', score) .. '\t0' .. in_lane,
             'A\t' .. ARGV[2] .. '\t' .. customer .. '\tnet')
  return {2, score, 0, 1, opens, paused, admitted_total, rate, last_tick}
else
  score = tonumber(ARGV[8]) + redis.call('INCR', KEYS[10])
  redis.call('RPUSH', KEYS[13], 'J\t' .. ARGV[2] .. '\t' .. customer .. '\t' .. string.format('%d', score) .. '\t0' .. in_lane)
end
redis.call('ZADD', KEYS[2], score, customer)
redis.call('ZADD', KEYS[7], now, customer)
redis.call('HDEL', KEYS[5], customer)
redis.call('HINCRBY', KEYS[6], 'joined', 1)
return {1, score, redis.call('ZRANK', KEYS[2], customer), 1, opens, paused, admitted_total, rate, last_tick}
