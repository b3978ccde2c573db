-- RecordPresence: the fans named are seen now, those of them who wait in
-- the queue (pre-queue included). Only members of the seen set are
-- touched (ZADD XX): a fan who is not waiting (admitted, gone, unknown) is
-- never added, so a report cannot bring anyone back or grow the set.
--
-- A room with lanes has a seen set per lane: the store reports the same
-- ids to each lane's (the general lane's answer names the lanes).
--
-- KEYS: 1 config, 2 seen
-- ARGV: 1 now (ms), then the customer ids
-- Reply: {exists, waiting, lane names (comma-separated, '' for none)}:
--        waiting is the number of the ids (repeats counted once each time)
--        that name a waiting fan
local names = redis.call('HGET', KEYS[1], 'names')
if not names then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return {0, 0, ''}
  end
  names = ''
end
local now = ARGV[1]
local waiting = 0
local CHUNK = 1000
for i = 2, #ARGV, CHUNK do
  local last = math.min(i + CHUNK - 1, #ARGV)
  local scores = redis.call('ZMSCORE', KEYS[2], unpack(ARGV, i, last))
  local members = {}
  for j = i, last do
    if scores[j - i + 1] then
      waiting = waiting + 1
      members[#members + 1] = now
      members[#members + 1] = ARGV[j]
    end
  end
  if #members > 0 then
    redis.call('ZADD', KEYS[2], 'XX', unpack(members))
  end
end
return {1, waiting, names}
