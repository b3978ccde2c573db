-- Moves the counters of a hold's seats (or, with no seats, of p_quantity
-- general-admission places) by p_held and p_sold each, stripes locked in
-- ascending order.
CREATE OR REPLACE FUNCTION booking_move_counters(
    p_event_id   bigint,
    p_section_id text,
    p_seat_ids   bigint[],
    p_quantity   integer,
    p_held       integer,
    p_sold       integer
) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
BEGIN
    PERFORM 1 FROM section_stripes st
     WHERE st.event_id = p_event_id AND st.section_id = p_section_id
       AND st.stripe = ANY (CASE WHEN cardinality(p_seat_ids) = 0 THEN ARRAY[0]
                                 ELSE ARRAY(SELECT DISTINCT (x % 16) FROM unnest(p_seat_ids) x) END)
     ORDER BY st.stripe
       FOR UPDATE;
    UPDATE section_stripes st SET held = st.held + m.n * p_held, sold = st.sold + m.n * p_sold
      FROM (SELECT (x % 16)::smallint AS stripe, count(*)::integer AS n FROM unnest(p_seat_ids) x GROUP BY 1
            UNION ALL
            SELECT 0::smallint, p_quantity WHERE cardinality(p_seat_ids) = 0) m
     WHERE st.event_id = p_event_id AND st.section_id = p_section_id AND st.stripe = m.stripe;
END;
$$;
