-- A customer's tickets in an event as the event's ticket limit counts them:
-- held, the seats of their live holds; bought, their confirmed bookings'
-- seats plus the tickets claimed transfers of confirmed bookings gave them,
-- less those they gave away. HoldSeats, the late payment of a lapsed hold
-- (booking_confirm_hold) and a waiting-list join all count this way. One
-- SELECT of a STABLE SQL function, so a query that calls it in FROM has it
-- inlined and planned with the rest.
CREATE OR REPLACE FUNCTION booking_customer_tickets(p_event_id bigint, p_customer_id text, p_now timestamptz)
RETURNS TABLE (held integer, bought integer)
LANGUAGE sql STABLE
AS $$
    SELECT COALESCE(t.held, 0)::integer, (COALESCE(t.bought, 0) + m.moved)::integer
      FROM (SELECT sum(h.quantity) FILTER (WHERE h.state = 'HELD' AND h.expires_at > p_now) AS held,
                   sum(h.quantity) FILTER (WHERE h.state = 'CONFIRMED') AS bought
              FROM holds h
             WHERE h.event_id = p_event_id AND h.customer_id = p_customer_id
               AND h.state IN ('HELD', 'CONFIRMED')) t,
           (SELECT count(*) FILTER (WHERE x.receiver_id = p_customer_id)
                   - count(*) FILTER (WHERE x.sender_id = p_customer_id) AS moved
              FROM claimed_transfers x
              JOIN holds b ON b.hold_id = x.hold_id AND b.state = 'CONFIRMED'
             WHERE x.event_id = p_event_id
               AND (x.receiver_id = p_customer_id OR x.sender_id = p_customer_id)) m
$$;
