-- Money given back at the provider without us (a refund made in the
-- provider's dashboard, a dispute) is recorded as a refund of source
-- PROVIDER, found by the provider's id of the charge.
ALTER TABLE refunds DROP CONSTRAINT refunds_source_check;
ALTER TABLE refunds ADD CONSTRAINT refunds_source_check
    CHECK (source IN ('REQUEST', 'AUTOMATIC', 'BOOKING_CANCELLED', 'PROVIDER'));
CREATE INDEX payments_provider_payment_id ON payments (provider_payment_id) WHERE provider_payment_id IS NOT NULL;

-- The hold's own expiry before StartPayment extended it for the charge: a
-- charge that is declined or fails gives the hold this expiry back. NULL:
-- started before this column (the extension stays).
ALTER TABLE payments ADD COLUMN hold_expires_at timestamptz;
