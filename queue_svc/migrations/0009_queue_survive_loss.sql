-- What the waiting room keeps beyond Redis, so that a rebuild after Redis
-- lost its data (queue_svc.rebuild) puts it back.
--
-- An operator's flags (FlagCustomer) enter the lifecycle: 'flagged', and
-- 'unflagged' for a fan taken out while still waiting.
ALTER TABLE queue_lifecycle DROP CONSTRAINT queue_lifecycle_kind_check;
ALTER TABLE queue_lifecycle ADD CONSTRAINT queue_lifecycle_kind_check CHECK (kind IN (
    'joined', 'admitted', 'claimed', 'left', 'ended', 'dropped',
    'no_show', 'expired', 'shadowed', 'unshadowed', 'flagged', 'unflagged'));

-- A staff pass is bound to the first account that joins with it
-- (queue_svc.lanes): Postgres decides whose it is, Redis
-- (`{ev:<id>}:staffpass:<pass id>`) answers the joins that follow.
CREATE TABLE queue_staff_pass_bindings (
    event_id    bigint      NOT NULL CHECK (event_id > 0),
    pass_id     text        NOT NULL CHECK (pass_id <> ''),
    customer_id text        NOT NULL CHECK (customer_id <> ''),
    expires_at  timestamptz NOT NULL,
    bound_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, pass_id)
);
