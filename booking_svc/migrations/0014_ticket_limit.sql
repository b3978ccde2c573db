-- The ticket limit: the most tickets one customer may have in an event,
-- bought (CONFIRMED) and held (live HELD holds) together. booking_hold_seats
-- checks it in the statement that makes the hold, and booking_confirm_hold
-- when a lapsed hold is paid for late. max_seats_per_customer keeps its
-- meaning: the most seats one customer may hold at once.
--
-- NULL is the event's max_seats_per_customer. The service writes the
-- number for every event it creates (the same default when the operator
-- gives none); the events that exist, and any a replica still running the
-- previous release creates during a rollout, take NULL, so the number
-- their operators chose for one customer now also bounds what that
-- customer may buy: a fan can no longer hold, pay and hold again without
-- end. Tickets bought before count; nobody loses one, but a customer
-- already past the limit can buy no more. Adding a NULL column rewrites
-- nothing.
ALTER TABLE events
    ADD COLUMN max_tickets_per_customer integer
        CONSTRAINT events_max_tickets_per_customer_check CHECK (max_tickets_per_customer > 0);
