-- Whether a session cookie was signed out (edge_svc/lua/signout.lua).
-- KEYS[1]  the cookie's key
return redis.call('EXISTS', KEYS[1])
