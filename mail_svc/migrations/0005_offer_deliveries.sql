-- A waiting-list offer's message is a kind of its own, one per offer: for
-- kind 'offer', hold_id is the offer's hold (booking's
-- waitlist_entries.offer_hold_id). Once the offer is bought, the booking's
-- tickets delivery has the same hold_id, with kind 'tickets'.
ALTER TABLE mail_deliveries DROP CONSTRAINT mail_deliveries_kind_check;
ALTER TABLE mail_deliveries ADD CONSTRAINT mail_deliveries_kind_check
    CHECK (kind IN ('tickets', 'void', 'transfer', 'offer'));
