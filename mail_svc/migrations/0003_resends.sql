-- An operator's resend (MailAdminService.ResendTickets) queues a delivery:
-- resend_at is when it was asked for, and the mailers' resend sweep takes
-- such a delivery at its next round (clearing the mark as it claims it),
-- as it takes one left PENDING for longer than the stream's claim time.
ALTER TABLE mail_deliveries ADD COLUMN resend_at timestamptz;

CREATE INDEX mail_deliveries_pending ON mail_deliveries (updated_at) WHERE state = 'PENDING';
