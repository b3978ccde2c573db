-- Verifiable draws (boxoffice.draw): the pre-queue's shuffle now, an
-- event's verified-fan draw later (another `purpose`).
--
-- One row per waiting room and purpose: the secret seed (revealed once
-- sealed) and its public commitment SHA-256(seed), the pseudonym key (never
-- revealed), how many entries of the Redis log of placements
-- (`{ev:<id>}:preq`) are copied into queue_draw_entries, and when the draw
-- was sealed: from then on nobody can be placed in it, and the seed and the
-- entries are public.
CREATE TABLE queue_draws (
    event_id          bigint      NOT NULL REFERENCES queue_events (event_id),
    purpose           text        NOT NULL CHECK (purpose <> ''),
    algorithm         text        NOT NULL,
    seed              bytea       NOT NULL CHECK (octet_length(seed) = 32),
    commitment        bytea       NOT NULL CHECK (octet_length(commitment) = 32),
    pseudonym_key     bytea       NOT NULL CHECK (octet_length(pseudonym_key) = 32),
    committed_at      timestamptz NOT NULL DEFAULT now(),
    recorded          bigint      NOT NULL DEFAULT 0 CHECK (recorded >= 0),
    sealed_at         timestamptz,
    participant_count bigint      CHECK (participant_count >= 0),
    PRIMARY KEY (event_id, purpose)
);

-- Every fan placed in a draw, once: their pseudonym and the score they got
-- (as placed; the verifier recomputes it from the seed).
CREATE TABLE queue_draw_entries (
    event_id  bigint NOT NULL,
    purpose   text   NOT NULL,
    -- Ordered byte by byte (the draw's order), whatever the database's collation.
    pseudonym text   COLLATE "C" NOT NULL CHECK (pseudonym ~ '^[0-9a-f]{32}$'),
    score     bigint NOT NULL CHECK (score >= 0 AND score < 1125899906842624),
    PRIMARY KEY (event_id, purpose, pseudonym),
    FOREIGN KEY (event_id, purpose) REFERENCES queue_draws (event_id, purpose)
);

-- The published order, read in pages.
CREATE INDEX queue_draw_entries_order ON queue_draw_entries (event_id, purpose, score, pseudonym);
