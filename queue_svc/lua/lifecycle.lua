-- The lifecycle recorder's read and trim of an event's lifecycle log (the
-- entries the join, fan, admit and flag scripts append; see
-- queue_svc.jobs.lifecycle) and its refusal counters.
--
-- The log's head is trimmed only here, and only once copied: the count of
-- entries trimmed (KEYS 3) moves with the LTRIM in this one script, so an
-- entry's absolute index (trimmed + its place in the list) never changes,
-- and a trim asked for from a stale start (another recorder trimmed
-- meanwhile) does nothing.
--
-- The log and its trimmed count live and die with the room's data; the
-- room's generation marker (KEYS 5, see queue_svc.rebuild) tells the log
-- of one life of the room from the next, so the recorder numbers entries
-- within their generation and nothing stored is skipped or overwritten
-- after a loss.
--
-- KEYS: 1 config, 2 lifecycle log, 3 entries trimmed, 4 refusal counters,
--       5 generation marker
-- ARGV: 1 'read' or 'trim', 2 most entries (read) / entries to trim,
--       3 (trim) the index within the generation the trim starts at,
--       4 (trim) that generation
-- Reply: read: {1, trimmed, n, generation, n entries..., refusal reason,
--        count, ...}; trim: {1} trimmed, {0} not (stale start, or another
--        generation); {-1} an event without a mirrored configuration and
--        no log; {-2} a room that lost its data and is not rebuilt yet
local trimmed = tonumber(redis.call('GET', KEYS[3]) or '0')
local generation = tonumber(redis.call('GET', KEYS[5]) or '0')
if ARGV[1] == 'trim' then
  local count = tonumber(ARGV[2])
  if trimmed ~= tonumber(ARGV[3]) or generation ~= tonumber(ARGV[4]) or count <= 0 then
    return {0}
  end
  redis.call('LTRIM', KEYS[2], count, -1)
  redis.call('INCRBY', KEYS[3], count)
  return {1}
end
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1}
end
if generation == 0 then
  return {-2}
end
local entries = redis.call('LRANGE', KEYS[2], 0, tonumber(ARGV[2]) - 1)
local reply = {1, trimmed, #entries, generation}
for i = 1, #entries do
  reply[#reply + 1] = entries[i]
end
local counts = redis.call('HGETALL', KEYS[4])
for i = 1, #counts do
  reply[#reply + 1] = counts[i]
end
return reply
