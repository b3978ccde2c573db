-- Verified-fan draws: one per event, for one of its lanes by code. Fans
-- register until closes_at (their pseudonym and score are entries of the
-- draw of purpose 'fan_draw' in queue_draw_entries, whose seed and
-- commitment are that draw's row in queue_draws); at the close the first
-- `winners` in the draw's order get a single-use code of the lane, made in
-- one batch (batch_id) in the transaction that marks the draw drawn.
CREATE TABLE queue_fan_draws (
    event_id         bigint      PRIMARY KEY REFERENCES queue_events (event_id),
    lane             text        NOT NULL CHECK (lane <> ''),
    closes_at        timestamptz NOT NULL,
    winners          bigint      NOT NULL CHECK (winners >= 1),
    code_validity_ms bigint      NOT NULL CHECK (code_validity_ms > 0),
    created_at       timestamptz NOT NULL DEFAULT now(),
    drawn_at         timestamptz,
    batch_id         bigint      REFERENCES queue_access_code_batches (batch_id)
);
CREATE INDEX queue_fan_draws_due ON queue_fan_draws (closes_at) WHERE drawn_at IS NULL;
