-- Check-ins: a ticket's first admission at the door. The primary key is the
-- rule that a ticket admits once: of two gates scanning it at one instant,
-- one inserts and the other finds the row.
CREATE TABLE checkins (
    ticket_id     uuid        PRIMARY KEY,
    event_id      bigint      NOT NULL,
    gate_id       text        NOT NULL,
    device_id     text        NOT NULL,
    checked_in_at timestamptz NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX checkins_by_event ON checkins (event_id, recorded_at);
