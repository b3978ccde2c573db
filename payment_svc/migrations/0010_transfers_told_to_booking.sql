-- A claimed transfer is told to BookingService (RecordTicketTransfer), which
-- counts the ticket against the receiver's limit at HoldSeats and refuses
-- the buyer's own cancel of the booking. The claim's commit is the outbox:
-- booking_told_at stays NULL until booking answered, and the payment
-- server's loop sends those again (booking records each transfer once).
-- Transfers claimed before this migration are told by that loop too.
ALTER TABLE ticket_transfers ADD COLUMN booking_told_at timestamptz;
CREATE INDEX ticket_transfers_untold ON ticket_transfers (ended_at) WHERE state = 'CLAIMED' AND booking_told_at IS NULL;
