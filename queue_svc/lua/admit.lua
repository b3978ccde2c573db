-- One admit tick of one event, atomically: refuse a deposed leader, drop
-- expired sessions, unclaimed admissions (no-shows) and dead waiters (not
-- seen for the presence grace), then admit from the head of the queue as
-- many fans as both the free slots (max active - active) and the admission
-- rate allow, and record the progress. Because the cap is read and applied
-- inside this one script, two admitters (and the joins' safety net) can
-- never exceed it together.
--
-- The rate is the admitter's target (ARGV 5, adapted within the room's
-- bounds; 0 = the configured rate), recorded with its reason for the
-- progress stream and the safety net. Every removal is bounded per tick
-- (ARGV 3) and costs in proportion to what it removes: the dead waiters are
-- the head of the seen set (ordered by last-seen time), never a scan of the
-- queue.
--
-- Fans an operator flagged (the shadow set) are never admitted: popped
-- from the head like the others, they move to the shadow queue with their
-- score (where their place reads as a normal wait) and the tick pops again
-- for the slots they did not take, a few rounds at most: the cost is in
-- proportion to the fans popped, never to those waiting or flagged.
--
-- Every fan the tick moves is appended to the event's lifecycle log (KEYS
-- 10; see queue_svc.jobs.lifecycle): one RPUSH per chunk, the tick's time once.
--
-- KEYS: 1 config, 2 queue, 3 admitted (unclaimed), 4 active, 5 outcomes,
--       6 progress, 7 seen, 8 shadow (flagged), 9 shadow queue,
--       10 lifecycle log, 11 the room's generation marker (see
--       queue_svc.rebuild)
-- ARGV: 1 now (ms), 2 leader epoch, 3 most removals per set and tick,
--       4 rate averaging window (ms), 5 target rate (per second, 0 = the
--       configured one), 6 the target's reason (a proto enum number),
--       7 the part of the free slots this script may fill (0 to 1; 1 when
--       absent): a room with lanes gives each lane its part in turn,
--       8 the room's generation in Postgres (the marker must be at least it),
--       9 whether booking says the event is sold out ('1' yes, '0' no, ''
--       not known now: the room's flag stays as it is); the flag is the
--       config's field 'soldout', and while it is '1' nobody is admitted
--       (the tick still ends what is due), 10 shoppers outside the room
--       that the cap counts (fans holding a waiting-list offer; 0 when
--       absent)
-- Reply: {code, admitted, expired, active, queue_length, admitted_through,
--         admitted_total, highest_epoch, dropped, no_shows_total,
--         claimed_total, sold_out (the flag after this tick, 1/0)}
--   code 0 done, -1 unknown event, -5 stale epoch, -8 the room lost its
--   data (its generation marker is gone or older than Postgres's): nobody
--   is admitted until it is rebuilt, so the cap holds across the loss
--   (nothing changed)
local now = tonumber(ARGV[1])
local epoch = tonumber(ARGV[2])
local seen = tonumber(redis.call('HGET', KEYS[6], 'epoch') or '0')
if epoch < seen then
  return {-5, 0, 0, 0, 0, 0, 0, seen, 0, 0, 0}
end
local cfg = redis.call('HMGET', KEYS[1], 'opens', 'paused', 'rate', 'max', 'claim', 'grace', 'soldout')
if not cfg[1] then
  return {-1, 0, 0, 0, 0, 0, 0, seen, 0, 0, 0}
end
local generation = tonumber(redis.call('GET', KEYS[11]) or '0')
if generation == 0 or generation < tonumber(ARGV[8] or '0') then
  return {-8, 0, 0, 0, 0, 0, 0, seen, 0, 0, 0}
end
if epoch > seen then
  redis.call('HSET', KEYS[6], 'epoch', epoch)
  seen = epoch
end
local sold_out = cfg[7] or '0'
local told = ARGV[9] or ''
if (told == '1' or told == '0') and told ~= sold_out then
  redis.call('HSET', KEYS[1], 'soldout', told)
  sold_out = told
end

local CHUNK = 1000
local most = tonumber(ARGV[3])
local stamp = '\t' .. ARGV[1] .. '\t'
-- Removes the members of KEYS[key] scored below `upto` (at most `most`),
-- from each set of `also` too, recording `outcome` for each and logging
-- `kind`.
local function remove(key, upto, also, outcome, kind)
  local prefix = kind .. stamp
  local gone = redis.call('ZRANGEBYSCORE', KEYS[key], '-inf', upto, 'LIMIT', 0, most)
  for i = 1, #gone, CHUNK do
    local last = math.min(i + CHUNK - 1, #gone)
    redis.call('ZREM', KEYS[key], unpack(gone, i, last))
    for _, other in ipairs(also) do
      redis.call('ZREM', KEYS[other], unpack(gone, i, last))
    end
    local outcomes = {}
    local entries = {}
    for j = i, last do
      outcomes[#outcomes + 1] = gone[j]
      outcomes[#outcomes + 1] = outcome
      entries[#entries + 1] = prefix .. gone[j]
    end
    redis.call('HSET', KEYS[5], unpack(outcomes))
    redis.call('RPUSH', KEYS[10], unpack(entries))
  end
  return #gone
end
local no_shows = remove(3, now, {}, 'E', 'N')
local expired = no_shows + remove(4, now, {}, 'E', 'X')
local no_shows_total = tonumber(redis.call('HGET', KEYS[6], 'noshow') or '0')
if no_shows > 0 then
  no_shows_total = redis.call('HINCRBY', KEYS[6], 'noshow', no_shows)
end
local dropped = 0
local grace = tonumber(cfg[6] or '0')
if grace > 0 then
  dropped = remove(7, '(' .. (now - grace), {2}, 'D', 'D')
end
local active = redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[4])

local prog = redis.call('HMGET', KEYS[6], 'last', 'carry', 'rate', 'through', 'admitted', 'claimed')
local last = tonumber(prog[1] or '0')
local carry = tonumber(prog[2] or '0')
local average = tonumber(prog[3] or '0')
local through = tonumber(prog[4] or '0')
local total = tonumber(prog[5] or '0')
local elapsed = 0
if last > 0 and now > last then
  elapsed = now - last
end
local rate = tonumber(ARGV[5])
if rate <= 0 then
  rate = tonumber(cfg[3])
end

local admitted = 0
if cfg[2] == '1' or sold_out == '1' or now < tonumber(cfg[1]) then
  carry = 0 -- nothing is banked while closed, paused or sold out
else
  -- The allowance grows at the rate and holds at most one second's worth
  -- (the carry may be below zero: what the safety net took ahead of time).
  local allowance = math.min(rate, carry + rate * elapsed / 1000)
  local free = tonumber(cfg[4]) - active - tonumber(ARGV[10] or '0')
  local n = math.min(free, math.floor(allowance))
  local share = tonumber(ARGV[7] or '1')
  if share < 1 then
    n = math.min(n, math.ceil(math.max(free, 0) * share))
  end
  local flagged = redis.call('SCARD', KEYS[8]) > 0
  local claim_by = now + tonumber(cfg[5])
  local admit_prefix = 'A' .. stamp
  local shadow_prefix = 'S' .. stamp
  local rounds = 0
  while n - admitted > 0 and rounds < 4 do
    rounds = rounds + 1
    local popped = redis.call('ZPOPMIN', KEYS[2], n - admitted)
    if #popped == 0 then
      break
    end
    through = math.max(through, tonumber(popped[#popped]))
    for i = 1, #popped, 2 * CHUNK do
      local members = {}
      local names = {}
      local shadowed = {}
      local entries = {}
      for j = i, math.min(i + 2 * CHUNK - 1, #popped), 2 do
        names[#names + 1] = popped[j]
        if flagged and redis.call('SISMEMBER', KEYS[8], popped[j]) == 1 then
          shadowed[#shadowed + 1] = popped[j + 1]
          shadowed[#shadowed + 1] = popped[j]
          entries[#entries + 1] = shadow_prefix .. popped[j]
        else
          members[#members + 1] = claim_by
          members[#members + 1] = popped[j]
          entries[#entries + 1] = admit_prefix .. popped[j] .. '\ttick'
        end
      end
      if #members > 0 then
        redis.call('ZADD', KEYS[3], unpack(members))
      end
      if #shadowed > 0 then
        redis.call('ZADD', KEYS[9], unpack(shadowed))
      end
      redis.call('RPUSH', KEYS[10], unpack(entries))
      redis.call('ZREM', KEYS[7], unpack(names))
      admitted = admitted + #members / 2
    end
    if not flagged then
      break
    end
  end
  if admitted > 0 then
    total = redis.call('HINCRBY', KEYS[6], 'admitted', admitted)
  end
  carry = allowance - admitted
end

-- Admissions per second, averaged exponentially over the window.
local window = tonumber(ARGV[4])
if elapsed > 0 then
  average = average + (1 - math.exp(-elapsed / window)) * (admitted * 1000 / elapsed - average)
else
  average = average + admitted * 1000 / window
end

redis.call('HSET', KEYS[6], 'last', math.max(last, now), 'carry', carry, 'rate', average, 'through', through,
           'target', rate, 'why', ARGV[6])
return {0, admitted, expired, active + admitted, redis.call('ZCARD', KEYS[2]), through, total, seen, dropped,
        no_shows_total, tonumber(prog[6] or '0'), tonumber(sold_out)}
