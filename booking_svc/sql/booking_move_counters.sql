-- The one place section counters move: every hold, release, confirm,
-- cancellation, sweep and lapsed-hold reclaim goes through here. Each move
-- adds held and sold to the stripe its seat counts in (stripe 0 of a
-- general-admission section). The stripes are locked first, in ascending
-- order (event, section, stripe), the order every transaction takes them
-- in, so no two wait on each other in a cycle; a stripe pushed past its
-- capacity fails its CHECK, and the statement with it (I2).
CREATE OR REPLACE FUNCTION booking_move_counters(p_moves booking_counter_move[]) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
BEGIN
    PERFORM 1
       FROM section_stripes st
       JOIN (SELECT DISTINCT m.event_id, m.section_id, COALESCE(m.seat_id % booking_stripes(), 0) AS stripe
               FROM unnest(p_moves) m
              WHERE m.held <> 0 OR m.sold <> 0) d
         ON st.event_id = d.event_id AND st.section_id = d.section_id AND st.stripe = d.stripe
      ORDER BY st.event_id, st.section_id, st.stripe
        FOR UPDATE OF st;
    UPDATE section_stripes st SET held = st.held + d.held, sold = st.sold + d.sold
      FROM (SELECT m.event_id, m.section_id, COALESCE(m.seat_id % booking_stripes(), 0) AS stripe,
                   sum(m.held)::integer AS held, sum(m.sold)::integer AS sold
              FROM unnest(p_moves) m
             GROUP BY 1, 2, 3) d
     WHERE st.event_id = d.event_id AND st.section_id = d.section_id AND st.stripe = d.stripe
       AND (d.held <> 0 OR d.sold <> 0);
END;
$$;
