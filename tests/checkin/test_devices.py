"""Gate devices against a real Postgres: a key shown once and kept hashed,
a device for its own event only, revocation at once, and the list surviving
a restart (a new store on a new pool reads the same devices)."""

from __future__ import annotations

import hashlib

from boxoffice import db
from checkin_svc.adapters.postgres import PgGateDeviceStore
from tests.checkin.harness import Door, new_event
from tests.payment.harness import open_pool
from tests.support import Stores


async def test_a_device_key_is_shown_once_kept_hashed_and_revocable(door: Door, stores: Stores) -> None:
    event = new_event()
    store = PgGateDeviceStore(door.pool)
    north, key = await store.create(event, "North gate")
    south, other_key = await store.create(event, "South gate")
    assert key.startswith("bxd_") and key != other_key
    # Only the hash is stored: the key itself is nowhere in the row.
    async with db.transaction(door.pool) as conn:
        cur = await conn.execute("SELECT * FROM gate_devices WHERE device_id = %s", (north.device_id,))
        row = await cur.fetchone()
    assert row is not None and key not in repr(row)
    assert hashlib.sha256(key.encode()).digest() in [bytes(v) for v in row if isinstance(v, bytes | memoryview)]
    found = await store.authenticate(key)
    assert found is not None and (found.device_id, found.event_id, found.name) == (north.device_id, event, "North gate")
    for bad in ("", "bxd_", key[:-1], key + "x", key.upper(), "Device " + key):
        assert await store.authenticate(bad) is None, bad
    # The device list survives a restart: a new pool and store read it.
    async with open_pool(stores) as pool:
        again = PgGateDeviceStore(pool)
        assert [d.name for d in await again.of_event(event)] == ["North gate", "South gate"]
        revoked = await again.revoke(north.device_id)
        assert revoked is not None and revoked.revoked_at is not None
        assert (await again.revoke(north.device_id)) == revoked  # again: no change
    assert await store.authenticate(key) is None
    assert await store.authenticate(other_key) is not None
    assert await store.revoke("00000000-0000-4000-8000-000000000000") is None
    assert south.event_id == event and await store.of_event(new_event()) == []
