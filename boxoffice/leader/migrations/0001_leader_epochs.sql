-- Leader election (Postgres backend; a database migrated before this table
-- moved here already has it): one row per elected role. A candidate
-- that takes the role's session advisory lock increments `epoch` in the same
-- transaction, so every change of leader gets a strictly larger epoch (a
-- fencing token the admitter's writes carry).
CREATE TABLE IF NOT EXISTS leader_epochs (
    name        text        PRIMARY KEY,
    epoch       bigint      NOT NULL CHECK (epoch > 0),
    holder      text        NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now()
);
