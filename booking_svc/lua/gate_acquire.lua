-- Seat gate: claim every seat key of one hold attempt, or none.
-- KEYS: one gate key per seat (all under the event's hash tag).
-- ARGV[1]: this attempt's token; ARGV[2]: time-to-live in milliseconds.
-- Returns the 1-based indexes of the keys already claimed by another
-- attempt (empty when this attempt now owns them all).
local taken = {}
for i, key in ipairs(KEYS) do
  local owner = redis.call('GET', key)
  if owner and owner ~= ARGV[1] then
    taken[#taken + 1] = i
  end
end
if #taken > 0 then
  return taken
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', tonumber(ARGV[2]))
end
return taken
