-- Ticket transfers that PaymentService's claims committed, as payment tells
-- booking (RecordTicketTransfer, once per transfer, again until answered):
-- the ticket of booking hold_id (its unit; generation, the re-issued
-- ticket's) passed from sender_id to receiver_id. While the booking is
-- confirmed, booking_hold_seats counts the ticket against the receiver's
-- ticket limit and no longer against the sender's; and while a unit's last
-- receiver is not the booking's buyer, the buyer's own cancel is refused
-- (TICKETS_TRANSFERRED).
CREATE TABLE claimed_transfers (
    transfer_id uuid        PRIMARY KEY,
    event_id    bigint      NOT NULL,
    hold_id     uuid        NOT NULL REFERENCES holds (hold_id),
    unit        integer     NOT NULL CHECK (unit >= 1),
    generation  integer     NOT NULL CHECK (generation >= 1),
    sender_id   text        NOT NULL,
    receiver_id text        NOT NULL,
    claimed_at  timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (hold_id, unit, generation)
);
-- A customer's tickets received and given in an event (booking_hold_seats).
CREATE INDEX claimed_transfers_receiver ON claimed_transfers (event_id, receiver_id);
CREATE INDEX claimed_transfers_sender ON claimed_transfers (event_id, sender_id);
