-- How many stripes a seated section's counters are spread over: a seat
-- counts in stripe seat_id % booking_stripes(), so neighbouring seats fall
-- in different stripes and a hot section's holds do not all queue on one
-- row lock. A general-admission section, which has no seats, counts in one
-- (stripe 0). Changing it needs the stripes of existing sections rebuilt.
CREATE OR REPLACE FUNCTION booking_stripes() RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS 'SELECT 16::smallint';
