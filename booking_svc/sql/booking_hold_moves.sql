-- The counter moves of one hold: each of p_seat_ids by p_held and p_sold
-- or, with no seats (general admission), p_quantity places.
CREATE OR REPLACE FUNCTION booking_hold_moves(
    p_event_id   bigint,
    p_section_id text,
    p_seat_ids   bigint[],
    p_quantity   integer,
    p_held       integer,
    p_sold       integer
) RETURNS booking_counter_move[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN COALESCE(cardinality(p_seat_ids), 0) = 0
                THEN ARRAY[ROW(p_event_id, p_section_id, NULL, p_quantity * p_held, p_quantity * p_sold)
                           ::booking_counter_move]
                ELSE ARRAY(SELECT ROW(p_event_id, p_section_id, s, p_held, p_sold)::booking_counter_move
                             FROM unnest(p_seat_ids) s)
           END
$$;
