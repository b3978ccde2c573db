-- A join the service refused before it reached the join script (a lane's
-- door: an access code or a staff pass), counted per reason in the event's
-- refusal counters, which the lifecycle recorder copies to Postgres.
--
-- KEYS: 1 refusal counters
-- ARGV: 1 reason
return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
