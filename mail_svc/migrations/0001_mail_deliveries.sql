-- The mailer's tables.
--
-- mail_recipients: where a booking's e-mail goes and in which language, as
-- the edge asserted the fan when they paid (a verified address only). Never
-- logged, never in a metric or a trace. No row: the booking has no address
-- and nothing is sent (its delivery says NO_ADDRESS).
CREATE TABLE mail_recipients (
    hold_id    uuid        PRIMARY KEY,
    email      text        NOT NULL CHECK (length(email) BETWEEN 3 AND 254 AND position('@' IN email) > 1),
    language   text        NOT NULL CHECK (language IN ('en', 'vi', 'pt-BR')),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One delivery per booking and message kind, written before the send (with
-- the Message-ID every resend of it carries) and marked after it.
CREATE TABLE mail_deliveries (
    hold_id    uuid        NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('tickets', 'void')),
    event_id   bigint      NOT NULL,
    message_id text        NOT NULL UNIQUE,
    state      text        NOT NULL CHECK (state IN ('PENDING', 'SENT', 'FAILED', 'NO_ADDRESS')),
    attempts   integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- The relay's answer to the last attempt that did not deliver.
    last_error text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz,
    PRIMARY KEY (hold_id, kind)
);

CREATE INDEX mail_deliveries_not_delivered ON mail_deliveries (event_id) WHERE state IN ('FAILED', 'NO_ADDRESS');
