-- A join the edge refused at the door (too many requests, a proof of work
-- missing, invalid or reused), counted per reason in the event's refusal
-- counters: the queue's lifecycle recorder copies them to Postgres for the
-- on-sale report.
--
-- KEYS: 1 the event's refusal counters ({ev:<id>}:refused)
-- ARGV: 1 reason
return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
