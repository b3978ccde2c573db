-- The queue's lifecycle, durable: every change of a fan's state the
-- queue's scripts appended to the event's Redis log (`{ev:<id>}:life`),
-- copied here in batches by the lifecycle recorder (queue_svc.jobs.lifecycle).
--
-- `idx` is the entry's absolute index in the event's log (entries trimmed
-- before it + its place in the list): a copy made twice (two recorders, or
-- a crash between the insert and the trim) is stored once.
CREATE TABLE queue_lifecycle (
    event_id    bigint      NOT NULL CHECK (event_id > 0),
    idx         bigint      NOT NULL CHECK (idx >= 0),
    kind        text        NOT NULL CHECK (kind IN (
                    'joined', 'admitted', 'claimed', 'left', 'ended', 'dropped',
                    'no_show', 'expired', 'shadowed', 'unshadowed')),
    at          timestamptz NOT NULL,
    customer_id text        NOT NULL CHECK (customer_id <> ''),
    -- joined: the queue score, and whether placed in the pre-queue.
    score       bigint,
    pre_queue   boolean,
    -- admitted: 'tick' or 'net' (at once, by the safety net); ended: why
    -- ('completed', 'abandoned', 'revoked', '' when not said).
    detail      text,
    PRIMARY KEY (event_id, idx)
);

-- One fan's life in order, and the retention's deletes.
CREATE INDEX queue_lifecycle_customer ON queue_lifecycle (event_id, customer_id, idx);
CREATE INDEX queue_lifecycle_at ON queue_lifecycle (at);

-- Joins the queue refused, per event and reason (the totals of the Redis
-- counters `{ev:<id>}:refused`; they only grow, so a copy keeps the larger).
CREATE TABLE queue_refusals (
    event_id   bigint      NOT NULL CHECK (event_id > 0),
    reason     text        NOT NULL CHECK (reason <> ''),
    refused    bigint      NOT NULL CHECK (refused >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, reason)
);
