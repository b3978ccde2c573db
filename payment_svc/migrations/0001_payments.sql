-- Payments, their idempotency keys, provider webhooks, refunds, tickets and
-- the stream events the consumers have processed.

CREATE TABLE payments (
    payment_id               uuid        PRIMARY KEY,
    hold_id                  uuid        NOT NULL,
    attempt                  integer     NOT NULL CHECK (attempt >= 1),
    event_id                 bigint      NOT NULL,
    customer_id              text        NOT NULL,
    amount_minor             bigint      NOT NULL CHECK (amount_minor >= 0),
    currency                 text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    payment_method           text        NOT NULL,
    state                    text        NOT NULL CHECK (state IN (
        'PENDING', 'CAPTURED', 'SUCCEEDED', 'DECLINED', 'FAILED',
        'REFUND_REQUIRED', 'REFUNDED', 'PARTIALLY_REFUNDED')),
    -- The key the provider deduplicates charges by: derived from the order.
    provider_idempotency_key text        NOT NULL UNIQUE,
    provider_payment_id      text,
    failure_reason           text        NOT NULL DEFAULT '',
    refunded_minor           bigint      NOT NULL DEFAULT 0
        CHECK (refunded_minor >= 0 AND refunded_minor <= amount_minor),
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    UNIQUE (hold_id, attempt)
);

-- At most one payment per hold that has taken, or may still take, money.
CREATE UNIQUE INDEX payments_one_live_per_hold ON payments (hold_id)
    WHERE state IN ('PENDING', 'CAPTURED', 'SUCCEEDED', 'PARTIALLY_REFUNDED');

-- What the reconciliation job looks at.
CREATE INDEX payments_unsettled ON payments (updated_at)
    WHERE state IN ('PENDING', 'CAPTURED', 'REFUND_REQUIRED');

-- Idempotency keys of ConfirmPayment and RefundPayment (Stripe's contract):
-- the first answer is stored and replayed; a row IN_FLIGHT marks a request
-- still running; rows are forgotten after their retention.
CREATE TABLE payment_idempotency_keys (
    scope         text        NOT NULL,
    key           text        NOT NULL,
    fingerprint   bytea       NOT NULL,
    state         text        NOT NULL CHECK (state IN ('IN_FLIGHT', 'DONE')),
    lock_token    uuid,
    locked_at     timestamptz,
    status_code   integer,
    response      bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE INDEX payment_idempotency_keys_expiry ON payment_idempotency_keys (expires_at);

-- Provider notifications, deduplicated by the provider's event id.
CREATE TABLE webhook_events (
    provider_event_id text        PRIMARY KEY,
    event_type        text        NOT NULL,
    payment_id        uuid,
    body_sha256       bytea       NOT NULL,
    body              bytea       NOT NULL,
    state             text        NOT NULL CHECK (state IN ('RECEIVED', 'APPLIED')),
    lock_token        uuid,
    locked_at         timestamptz,
    deliveries        integer     NOT NULL DEFAULT 1,
    received_at       timestamptz NOT NULL DEFAULT now(),
    applied_at        timestamptz
);

CREATE TABLE refunds (
    refund_id          uuid        PRIMARY KEY,
    payment_id         uuid        NOT NULL REFERENCES payments (payment_id),
    -- Unique per payment: a client's request id, or a key the service derives
    -- (automatic refund, cancelled booking).
    request_key        text        NOT NULL,
    amount_minor       bigint      NOT NULL CHECK (amount_minor > 0),
    currency           text        NOT NULL,
    reason             text        NOT NULL DEFAULT '',
    source             text        NOT NULL CHECK (source IN ('REQUEST', 'AUTOMATIC', 'BOOKING_CANCELLED')),
    state              text        NOT NULL CHECK (state IN ('PENDING', 'SUCCEEDED', 'FAILED')),
    provider_refund_id text,
    failure_reason     text        NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (payment_id, request_key)
);

CREATE INDEX refunds_pending ON refunds (updated_at) WHERE state = 'PENDING';

-- Tickets: one per seat of a confirmed booking (per unit for general
-- admission). A seat has at most one valid ticket: the last line against a
-- double sale. A cancelled booking's tickets are voided, so that its seat can
-- be sold and ticketed again.
CREATE TABLE tickets (
    ticket_id       uuid        PRIMARY KEY,
    event_id        bigint      NOT NULL,
    hold_id         uuid        NOT NULL,
    unit            integer     NOT NULL CHECK (unit >= 1),
    customer_id     text        NOT NULL,
    section_id      text        NOT NULL,
    seat_id         bigint,
    seat_label      text        NOT NULL DEFAULT '',
    payment_id      text        NOT NULL DEFAULT '',
    source_event_id uuid        NOT NULL,
    code            text        NOT NULL UNIQUE,
    issued_at       timestamptz NOT NULL DEFAULT now(),
    voided_at       timestamptz,
    UNIQUE (hold_id, unit)
);

CREATE UNIQUE INDEX tickets_one_valid_per_seat ON tickets (event_id, seat_id)
    WHERE seat_id IS NOT NULL AND voided_at IS NULL;

CREATE INDEX tickets_by_customer ON tickets (event_id, customer_id, issued_at, ticket_id);

-- Bookings whose cancellation the issuer has seen; a confirmation processed
-- after it issues nothing valid.
CREATE TABLE cancelled_bookings (
    hold_id         uuid        PRIMARY KEY,
    source_event_id uuid        NOT NULL,
    cancelled_at    timestamptz NOT NULL DEFAULT now()
);

-- Stream events each consumer group has applied: redelivery changes nothing.
CREATE TABLE processed_stream_events (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
