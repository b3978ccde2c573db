-- Each ticket's own secret for its rotating code: made when the fan's page
-- first asks for it, read by the door to check a rotating code's mac.
CREATE TABLE ticket_secrets (
    ticket_id  uuid        PRIMARY KEY,
    secret     bytea       NOT NULL CHECK (length(secret) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);
