-- Reserves the next moment one more message may be handed to a relay, for
-- every mailer that sends through it (GCRA's virtual scheduling, queueing
-- instead of refusing): at most `burst` at once, then one every `interval`.
--
-- KEYS[1]: the relay's pace (its theoretical arrival time, in microseconds).
-- ARGV[1]: now (microseconds); ARGV[2]: the interval (microseconds);
-- ARGV[3]: the burst (messages).
-- Returns how long the caller waits before sending (microseconds).
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end
local at = tat - (burst - 1) * interval
if at < now then
  at = now
end
local next_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%.0f', next_tat), 'PX', math.ceil((next_tat - now) / 1000) + 1000)
return math.floor(at - now)
