-- A ticket transfer's claim link is a message kind of its own, one per
-- transfer: for kind 'transfer', hold_id is the transfer's id.
ALTER TABLE mail_deliveries DROP CONSTRAINT mail_deliveries_kind_check;
ALTER TABLE mail_deliveries ADD CONSTRAINT mail_deliveries_kind_check CHECK (kind IN ('tickets', 'void', 'transfer'));
