-- The sandbox payment provider's own records. They stand for a real
-- provider's database: they outlive the payment service's processes and
-- are shared by its replicas, so a charge made through one replica is found,
-- refunded and announced by any other.

CREATE TABLE sandbox_charges (
    idempotency_key text        PRIMARY KEY,
    charge_id       text        NOT NULL UNIQUE,
    fingerprint     bytea       NOT NULL,
    amount_minor    bigint      NOT NULL,
    currency        text        NOT NULL,
    payment_method  text        NOT NULL,
    metadata        jsonb       NOT NULL,
    status          text        NOT NULL CHECK (status IN ('CAPTURED', 'DECLINED', 'FAILED', 'PROCESSING')),
    failure_code    text        NOT NULL DEFAULT '',
    refunded_minor  bigint      NOT NULL DEFAULT 0,
    settles_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX sandbox_charges_processing ON sandbox_charges (settles_at) WHERE status = 'PROCESSING';

CREATE TABLE sandbox_refunds (
    idempotency_key text        PRIMARY KEY,
    refund_id       text        NOT NULL UNIQUE,
    charge_id       text        NOT NULL,
    fingerprint     bytea       NOT NULL,
    amount_minor    bigint      NOT NULL,
    status          text        NOT NULL CHECK (status IN ('SUCCEEDED', 'FAILED')),
    failure_code    text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Webhooks the sandbox owes: each leaves after a random delay, some twice
-- (copies_left = 2), some never (dropped), retried with backoff when refused.
CREATE TABLE sandbox_webhooks (
    provider_event_id text        PRIMARY KEY,
    seq               bigserial   NOT NULL,
    event_type        text        NOT NULL,
    payment_id        text        NOT NULL DEFAULT '',
    body              bytea       NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    deliver_after     timestamptz NOT NULL,
    copies_left       integer     NOT NULL,
    attempts          integer     NOT NULL DEFAULT 0,
    dropped           boolean     NOT NULL DEFAULT false,
    done_at           timestamptz
);

CREATE INDEX sandbox_webhooks_due ON sandbox_webhooks (deliver_after) WHERE done_at IS NULL;
CREATE INDEX sandbox_webhooks_by_payment ON sandbox_webhooks (payment_id, seq);
