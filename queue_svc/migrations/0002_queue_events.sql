-- The configuration of each event's waiting room. Postgres holds it
-- durably; Redis holds a mirror (`{ev:<id>}:cfg`) that the Lua scripts read,
-- rewritten whenever `version` grows and re-mirrored by the admitter.
CREATE TABLE queue_events (
    event_id                  bigint      PRIMARY KEY CHECK (event_id > 0),
    opens_at                  timestamptz NOT NULL,
    pre_queue_window_ms       bigint      NOT NULL CHECK (pre_queue_window_ms >= 0),
    admission_rate_per_second integer     NOT NULL CHECK (admission_rate_per_second > 0),
    max_active_shoppers       integer     NOT NULL CHECK (max_active_shoppers > 0),
    session_length_ms         bigint      NOT NULL CHECK (session_length_ms > 0),
    token_ttl_ms              bigint      NOT NULL CHECK (token_ttl_ms > 0),
    claim_grace_ms            bigint      NOT NULL CHECK (claim_grace_ms > 0),
    paused                    boolean     NOT NULL DEFAULT false,
    version                   bigint      NOT NULL DEFAULT 1 CHECK (version > 0),
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now()
);
