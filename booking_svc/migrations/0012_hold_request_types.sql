-- The composite types the hold and counter functions of sql/ take, and the
-- functions they replace, dropped (a repeatable file re-creates only its
-- own object; a signature that is gone must be dropped here).
--
-- booking_hold_request: one HoldSeats call. seat_ids for explicit seats
-- (ascending; NULL for best available), else section_id and quantity;
-- request_id NULL when the call has none; timeout_ms is what is left of
-- the caller's deadline.
CREATE TYPE booking_hold_request AS (
    event_id    bigint,
    customer_id text,
    seat_ids    bigint[],
    section_id  text,
    quantity    integer,
    hold_id     uuid,
    request_id  text,
    fingerprint text,
    timeout_ms  integer
);

-- booking_counter_move: held and sold added to the counter of one seat
-- (the stripe it counts in) or, with seat_id NULL, of a general-admission
-- section (its one stripe).
CREATE TYPE booking_counter_move AS (
    event_id   bigint,
    section_id text,
    seat_id    bigint,
    held       integer,
    sold       integer
);

DROP FUNCTION IF EXISTS booking_hold_seats(bigint, text, bigint[], text, integer, uuid, text, text, timestamptz,
                                           double precision, integer);
DROP FUNCTION IF EXISTS booking_hold_batch(bigint[], text[], integer[], bigint[], text[], integer[], uuid[], text[],
                                           text[], integer[], timestamptz, double precision);
DROP FUNCTION IF EXISTS booking_move_counters(bigint, text, bigint[], integer, integer, integer);

-- How many stripes a seated section counts in is booking_stripes() alone.
ALTER TABLE section_stripes
    DROP CONSTRAINT section_stripes_stripe_check,
    ADD CONSTRAINT section_stripes_stripe_check CHECK (stripe >= 0);
