-- The audit log of administration: one row per admin action, appended in the
-- transaction that made the change. Every service that serves an admin API
-- applies this file under its own component name, so a database shared by
-- several services runs it more than once: each statement is idempotent.
CREATE TABLE IF NOT EXISTS admin_audit (
    audit_id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    -- Who: the caller's SPIFFE ID and role (NULL for a call without one).
    caller_identity text,
    caller_role     text,
    -- What: the RPC and its request.
    service         text        NOT NULL,
    method          text        NOT NULL,
    request         jsonb       NOT NULL,
    -- The resource as it was before the call and as it is after it (NULL
    -- when it did not exist).
    before          jsonb,
    after           jsonb,
    -- 'OK', or the canonical code of the error the caller got, with its
    -- ErrorInfo reason and message.
    outcome         text        NOT NULL,
    reason          text,
    message         text
);

CREATE INDEX IF NOT EXISTS admin_audit_by_method ON admin_audit (service, method, recorded_at);

-- Append-only: rows are never changed or removed.
CREATE OR REPLACE FUNCTION admin_audit_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'admin_audit is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE OR REPLACE TRIGGER admin_audit_append_only
    BEFORE UPDATE OR DELETE ON admin_audit
    FOR EACH ROW EXECUTE FUNCTION admin_audit_refuse_change();

CREATE OR REPLACE TRIGGER admin_audit_no_truncate
    BEFORE TRUNCATE ON admin_audit
    FOR EACH STATEMENT EXECUTE FUNCTION admin_audit_refuse_change();
