-- Ticket transfers: a fan offers a ticket to a friend by e-mail; the friend
-- claims it, signed in, and the ticket is re-issued to them.
--
-- A re-issued ticket is a new row of the same booking and unit, one
-- generation later, with a new id and code; the old row is void (its code
-- no longer admits at the door) and marked transferred, so that its former
-- holder no longer lists it. (hold_id, unit) is unique per generation.
ALTER TABLE tickets
    ADD COLUMN generation       integer NOT NULL DEFAULT 0 CHECK (generation >= 0),
    ADD COLUMN transferred_at   timestamptz,
    ADD COLUMN transferred_from uuid;
ALTER TABLE tickets DROP CONSTRAINT tickets_hold_id_unit_key;
ALTER TABLE tickets ADD CONSTRAINT tickets_hold_id_unit_generation_key UNIQUE (hold_id, unit, generation);

-- One row per offer. claim_secret is the link's secret (random, 256 bits),
-- kept for the mailer to write the link and cleared once the transfer ends;
-- email and language are where and how the link is sent. Never logged.
CREATE TABLE ticket_transfers (
    transfer_id   uuid        PRIMARY KEY,
    ticket_id     uuid        NOT NULL REFERENCES tickets (ticket_id),
    event_id      bigint      NOT NULL,
    sender_id     text        NOT NULL,
    email         text        NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    language      text        NOT NULL CHECK (language IN ('en', 'vi', 'pt-BR')),
    claim_secret  text        NOT NULL,
    state         text        NOT NULL CHECK (state IN ('PENDING', 'CLAIMED', 'CANCELLED')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    receiver_id   text,
    new_ticket_id uuid
);

-- A ticket has at most one pending transfer.
CREATE UNIQUE INDEX ticket_transfers_one_pending ON ticket_transfers (ticket_id) WHERE state = 'PENDING';
-- The mailer finds the pending transfers it has not written to yet.
CREATE INDEX ticket_transfers_pending ON ticket_transfers (created_at) WHERE state = 'PENDING';
