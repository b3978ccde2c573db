-- Lanes and their access codes (additive; existing rooms have no lanes).
--
-- A room's lanes besides the general one, as the admin API sets them: a
-- JSON array of {"name", "entry", "share_percent", "opens_at_ms",
-- "pre_queue_window_ms"} (queue_svc.adapters.pg_waiting_rooms reads and
-- writes it; the service validates it before storing).
ALTER TABLE queue_events
    ADD COLUMN lanes jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(lanes) = 'array');

-- A batch of access codes for one lane of one event, made by an operator.
CREATE TABLE queue_access_code_batches (
    batch_id    bigserial   PRIMARY KEY,
    event_id    bigint      NOT NULL REFERENCES queue_events (event_id),
    lane        text        NOT NULL CHECK (lane <> ''),
    max_uses    integer     NOT NULL CHECK (max_uses >= 1),
    valid_from  timestamptz NOT NULL,
    valid_until timestamptz NOT NULL CHECK (valid_until > valid_from),
    label       text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One code: only its SHA-256 is stored (of the code as typed, upper-cased,
-- without dashes), with how many accounts are bound to it.
CREATE TABLE queue_access_codes (
    code_hash bytea   PRIMARY KEY CHECK (octet_length(code_hash) = 32),
    batch_id  bigint  NOT NULL REFERENCES queue_access_code_batches (batch_id),
    uses      integer NOT NULL DEFAULT 0 CHECK (uses >= 0)
);
CREATE INDEX queue_access_codes_batch ON queue_access_codes (batch_id);

-- The accounts a code is bound to, each once: joining again with the code
-- is no new use.
CREATE TABLE queue_access_code_uses (
    code_hash   bytea       NOT NULL REFERENCES queue_access_codes (code_hash),
    customer_id text        NOT NULL,
    used_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (code_hash, customer_id)
);
