-- Seat gate: drop the keys this attempt still owns.
-- KEYS: the attempt's seat gate keys; ARGV[1]: the attempt's token.
-- Returns how many keys were dropped.
local dropped = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    dropped = dropped + 1
  end
end
return dropped
