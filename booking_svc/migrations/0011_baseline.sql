-- replaces: 0001-0010
-- BookingService's schema as versions 0001-0010 left it, in one file: a
-- database migrated through 0010 is recorded at this baseline without
-- running it, a fresh one runs it. Tables, indexes and constraints only;
-- the functions and views are the repeatable files of sql/.
--
-- Events, sections with their counters in stripes, seats, holds, the
-- idempotency records of holds and confirms, and the transactional outbox.
-- Postgres is the arbiter: the conditional UPDATEs of the hold function
-- and the CHECK constraints here are what keep a seat from being held or
-- sold twice.

CREATE TABLE events (
    event_id               bigint      PRIMARY KEY CHECK (event_id > 0),
    display_name           text        NOT NULL,
    kind                   text        NOT NULL CHECK (kind IN ('CONCERT', 'FLIGHT')),
    starts_at              timestamptz NOT NULL,
    hold_ttl_seconds       integer     NOT NULL CHECK (hold_ttl_seconds > 0),
    max_seats_per_customer integer     NOT NULL CHECK (max_seats_per_customer > 0),
    refundable_until       timestamptz,
    refund_percent         integer     NOT NULL DEFAULT 0 CHECK (refund_percent BETWEEN 0 AND 100),
    created_at             timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sections (
    event_id       bigint  NOT NULL REFERENCES events (event_id),
    section_id     text    NOT NULL,
    display_name   text    NOT NULL,
    kind           text    NOT NULL CHECK (kind IN ('SEATED', 'GENERAL_ADMISSION')),
    capacity       integer NOT NULL CHECK (capacity >= 0),
    overbook_limit integer NOT NULL DEFAULT 0 CHECK (overbook_limit >= 0),
    price_minor    bigint  NOT NULL CHECK (price_minor >= 0),
    currency       text    NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    PRIMARY KEY (event_id, section_id)
);

-- A section's live counters, in stripes. One counter row per section would
-- serialise every hold of the section on that row's lock, held until the
-- commit's WAL flush. A seated section counts in 16 stripes (a seat counts
-- in stripe seat_id % 16, so neighbouring seats fall in different
-- stripes); a general-admission section, which has no seats, in one
-- (stripe 0). Each stripe carries the capacity CHECK (I2); the stripes'
-- capacities add up to the section's capacity plus its overbook limit.
CREATE TABLE section_stripes (
    event_id   bigint   NOT NULL,
    section_id text     NOT NULL,
    stripe     smallint NOT NULL CHECK (stripe BETWEEN 0 AND 15),
    capacity   integer  NOT NULL CHECK (capacity >= 0),
    sold       integer  NOT NULL DEFAULT 0 CHECK (sold >= 0),
    held       integer  NOT NULL DEFAULT 0 CHECK (held >= 0),
    PRIMARY KEY (event_id, section_id, stripe),
    FOREIGN KEY (event_id, section_id) REFERENCES sections (event_id, section_id),
    CONSTRAINT section_stripes_within_capacity CHECK (sold + held <= capacity)
);

-- Rows of a seated section: consecutive seat ids and numbers (the seat map).
CREATE TABLE seat_rows (
    event_id          bigint  NOT NULL,
    section_id        text    NOT NULL,
    row_label         text    NOT NULL,
    first_seat_id     bigint  NOT NULL,
    first_seat_number integer NOT NULL CHECK (first_seat_number > 0),
    seat_count        integer NOT NULL CHECK (seat_count > 0),
    PRIMARY KEY (event_id, section_id, row_label),
    FOREIGN KEY (event_id, section_id) REFERENCES sections (event_id, section_id)
);

CREATE TABLE seats (
    event_id        bigint      NOT NULL,
    seat_id         bigint      NOT NULL CHECK (seat_id > 0),
    section_id      text        NOT NULL,
    row_label       text        NOT NULL,
    seat_number     integer     NOT NULL,
    label           text        NOT NULL,
    status          text        NOT NULL DEFAULT 'AVAILABLE' CHECK (status IN ('AVAILABLE', 'HELD', 'SOLD')),
    hold_id         uuid,
    hold_expires_at timestamptz,
    PRIMARY KEY (event_id, seat_id),
    FOREIGN KEY (event_id, section_id) REFERENCES sections (event_id, section_id),
    UNIQUE (event_id, section_id, row_label, seat_number),
    CONSTRAINT seats_hold_matches_status CHECK (
        (status = 'AVAILABLE' AND hold_id IS NULL AND hold_expires_at IS NULL)
        OR (status = 'HELD' AND hold_id IS NOT NULL AND hold_expires_at IS NOT NULL)
        OR (status = 'SOLD' AND hold_id IS NOT NULL AND hold_expires_at IS NULL)
    )
);

-- Best available walks only the seats still for sale.
CREATE INDEX seats_available ON seats (event_id, section_id, seat_id) WHERE status = 'AVAILABLE';
-- Lapsed holds that best available may reclaim before the sweeper does.
CREATE INDEX seats_lapsed ON seats (event_id, section_id, hold_expires_at) WHERE status = 'HELD';

CREATE TABLE holds (
    hold_id             uuid        PRIMARY KEY,
    event_id            bigint      NOT NULL,
    customer_id         text        NOT NULL,
    section_id          text        NOT NULL,
    quantity            integer     NOT NULL CHECK (quantity > 0),
    state               text        NOT NULL CHECK (state IN ('HELD', 'CONFIRMED', 'EXPIRED', 'RELEASED', 'CANCELLED')),
    amount_minor        bigint      NOT NULL CHECK (amount_minor >= 0),
    currency            text        NOT NULL,
    expires_at          timestamptz NOT NULL,
    created_at          timestamptz NOT NULL,
    confirmed_at        timestamptz,
    payment_id          text,
    ended_at            timestamptz,
    refund_amount_minor bigint,
    cancel_reason       text
);
-- No foreign keys on holds and hold_seats: every hold would take a KEY SHARE
-- lock on its hot section row (a MultiXact per concurrent hold). The hold
-- function writes only ids it has just read.

CREATE INDEX holds_customer ON holds (event_id, customer_id, state);
CREATE INDEX holds_lapsing ON holds (expires_at) WHERE state = 'HELD';
CREATE INDEX holds_newest ON holds (event_id, created_at DESC, hold_id DESC);
-- The per-customer limit reads only the customer's live holds.
CREATE INDEX holds_live_by_customer ON holds (event_id, customer_id) WHERE state = 'HELD';

-- The seats a hold took (kept after the hold ends, for its history), with
-- their labels, which never change: reading a hold touches holds and
-- hold_seats only, never seats.
CREATE TABLE hold_seats (
    hold_id     uuid    NOT NULL,
    event_id    bigint  NOT NULL,
    seat_id     bigint  NOT NULL,
    row_label   text    NOT NULL,
    seat_number integer NOT NULL,
    label       text    NOT NULL,
    PRIMARY KEY (hold_id, seat_id)
);

-- HoldSeats request_id: a retry returns the first hold (AIP-155).
CREATE TABLE hold_requests (
    event_id    bigint      NOT NULL,
    customer_id text        NOT NULL,
    request_id  text        NOT NULL,
    fingerprint text        NOT NULL,
    hold_id     uuid        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, customer_id, request_id)
);

-- ConfirmHold idempotency: the first answer (success or error) per key.
CREATE TABLE confirmations (
    idempotency_key text        PRIMARY KEY,
    hold_id         uuid        NOT NULL,
    payment_id      text        NOT NULL,
    amount_minor    bigint      NOT NULL,
    currency        text        NOT NULL,
    outcome         jsonb,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Transactional outbox (Debezium outbox layout); the outbox relay publishes
-- rows and sets published_at.
CREATE TABLE outbox (
    id            uuid        PRIMARY KEY,
    aggregatetype text        NOT NULL,
    aggregateid   text        NOT NULL,
    type          text        NOT NULL,
    payload       jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    seq           bigserial   NOT NULL,
    published_at  timestamptz
);

CREATE INDEX outbox_unpublished ON outbox (seq) WHERE published_at IS NULL;
-- The relay picks, for each order (aggregateid) among a batch of unpublished
-- rows, the oldest unpublished row of that order: look it up by order
-- instead of walking every unpublished row.
CREATE INDEX outbox_unpublished_by_aggregate ON outbox (aggregateid, seq) WHERE published_at IS NULL;
