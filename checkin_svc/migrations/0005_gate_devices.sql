-- Gate devices: a phone or scanner of the door staff, for one event. Its key
-- is shown once at creation and kept only as its SHA-256 (a key is 32 random
-- bytes, so a plain hash is enough); a revoked device is refused at once.
CREATE TABLE gate_devices (
    device_id  uuid        PRIMARY KEY,
    event_id   bigint      NOT NULL,
    name       text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    key_sha256 bytea       NOT NULL UNIQUE CHECK (length(key_sha256) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

CREATE INDEX gate_devices_by_event ON gate_devices (event_id, created_at);
