-- Offline scans that admitted a ticket someone else had admitted first:
-- recorded, so that the door's staff and the report see them. A device's
-- scan is recorded once however often the device uploads it.
CREATE TABLE checkin_conflicts (
    event_id            bigint      NOT NULL,
    ticket_id           uuid        NOT NULL,
    device_id           text        NOT NULL,
    gate_id             text        NOT NULL,
    scanned_at          timestamptz NOT NULL,
    first_device_id     text        NOT NULL,
    first_gate_id       text        NOT NULL,
    first_checked_in_at timestamptz NOT NULL,
    recorded_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ticket_id, device_id, scanned_at)
);

CREATE INDEX checkin_conflicts_by_event ON checkin_conflicts (event_id, recorded_at);
