-- An event's waiting list: fans who wait, once the event (or a section) is
-- sold out, for seats that come back. One entry per fan and event; a fan
-- who leaves and joins again goes to the back (a new place from the
-- sequence). An offer is a hold in the fan's name (offer_hold_id) that
-- lapses after the event's waitlist_offer_minutes.
--
-- States: WAITING (for seats), OFFERED (seats held for the fan), TAKEN (the
-- offer bought), LEFT (left the list or declined the offer), LAPSED (the
-- offer ran out untaken). The open ones (WAITING, OFFERED) are found by the
-- partial index in the list's order.
CREATE SEQUENCE waitlist_places;

CREATE TABLE waitlist_entries (
    event_id      bigint      NOT NULL REFERENCES events (event_id) ON DELETE CASCADE,
    customer_id   text        NOT NULL,
    place         bigint      NOT NULL DEFAULT nextval('waitlist_places'),
    section_id    text,
    quantity      integer     NOT NULL CHECK (quantity BETWEEN 1 AND 100),
    state         text        NOT NULL CHECK (state IN ('WAITING', 'OFFERED', 'TAKEN', 'LEFT', 'LAPSED')),
    joined_at     timestamptz NOT NULL,
    offer_hold_id uuid,
    offered_at    timestamptz,
    ended_at      timestamptz,
    PRIMARY KEY (event_id, customer_id),
    CHECK ((state IN ('OFFERED', 'TAKEN')) <= (offer_hold_id IS NOT NULL))
);

CREATE INDEX waitlist_entries_open ON waitlist_entries (event_id, place)
    WHERE state IN ('WAITING', 'OFFERED');
-- Whether fans wait for a section (or any: section_id NULL), probed by
-- HoldSeats and the stock; and the open offers.
CREATE INDEX waitlist_entries_waiting ON waitlist_entries (event_id, section_id) WHERE state = 'WAITING';
CREATE INDEX waitlist_entries_offered ON waitlist_entries (event_id) WHERE state = 'OFFERED';
CREATE UNIQUE INDEX waitlist_entries_offer ON waitlist_entries (offer_hold_id)
    WHERE offer_hold_id IS NOT NULL;

-- How long an offer holds its seats for the fan.
ALTER TABLE events
    ADD COLUMN waitlist_offer_minutes integer NOT NULL DEFAULT 15
        CHECK (waitlist_offer_minutes BETWEEN 1 AND 1440);

-- A hold made for a waiting-list offer: it skips the waiting list's guard
-- (it is the list's own hold) and lapses after offer_seconds instead of the
-- event's hold time. NULL for every other hold.
ALTER TYPE booking_hold_request ADD ATTRIBUTE offer_seconds integer;
