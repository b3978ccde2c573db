-- booking_taken_seat: a seat booking_hold_seats has given to a winning hold
-- and will write: the hold, the seat with its labels, when the hold lapses,
-- and whether taking it moves the counters (a lapsed hold's seat taken
-- over is already counted as held).
CREATE TYPE booking_taken_seat AS (
    hold_id     uuid,
    event_id    bigint,
    section_id  text,
    seat_id     bigint,
    row_label   text,
    seat_number integer,
    label       text,
    expires_at  timestamptz,
    counted     boolean
);
