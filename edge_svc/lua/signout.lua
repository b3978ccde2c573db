-- A session cookie signed out: remembered until it would have expired.
-- KEYS[1]  the cookie's key   ARGV[1] how long to remember it (ms, >= 1)
redis.call('SET', KEYS[1], '1', 'PX', tonumber(ARGV[1]))
return 1
