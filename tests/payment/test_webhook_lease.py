"""A provider webhook's claim is leased, as the idempotency keys are: its
owner renews the lease while it applies the event, so a living owner keeps
it however long that takes, and an owner that died (killed, cut off) stops
renewing and its claim is taken over once the lease lapses, seconds later
(it used to be held for a fixed 60 s). Real Postgres."""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid

from boxoffice import db
from boxoffice.runtime import Pool
from payment_svc.adapters.webhook_events import PgWebhookStore
from payment_svc.idempotency import leased
from payment_svc.ports import ClaimState, WebhookClaim

_LEASE = 1.5
_BODY = b'{"id": "evt_lease"}'


async def _claim(store: PgWebhookStore, event_id: str) -> WebhookClaim:
    return await store.claim(event_id, "charge.succeeded", None, hashlib.sha256(_BODY).digest(), _BODY)


async def _state(pool: Pool, event_id: str) -> str:
    async with db.transaction(pool) as conn:
        cur = await conn.execute("SELECT state FROM webhook_events WHERE provider_event_id = %s", (event_id,))
        row = await cur.fetchone()
    assert row is not None
    return str(row[0])


async def test_a_claim_whose_owner_died_is_taken_over_once_its_lease_lapses(pool: Pool) -> None:
    store = PgWebhookStore(pool, lease_seconds=_LEASE)
    event_id = f"evt_{uuid.uuid4().hex}"
    started = time.monotonic()
    dead = await _claim(store, event_id)
    assert dead.state == ClaimState.OWNED and dead.token
    # The owner dies here: it neither renews, nor marks the event applied, nor releases it.
    assert (await _claim(store, event_id)).state == ClaimState.IN_FLIGHT
    for _ in range(400):  # polled for up to 20 s (the old fixed lock: 60 s)
        taken = await _claim(store, event_id)
        if taken.state != ClaimState.IN_FLIGHT:
            break
        await asyncio.sleep(0.05)
    waited = time.monotonic() - started
    assert taken.state == ClaimState.OWNED and taken.token != dead.token
    assert waited >= _LEASE * 0.9, waited  # not before the lease lapsed
    # The dead owner's late word changes nothing; the new owner's counts.
    assert not await store.renew(event_id, dead.token)
    await store.applied(event_id, dead.token)
    assert await _state(pool, event_id) == "RECEIVED"
    await store.applied(event_id, taken.token)
    assert await _state(pool, event_id) == "APPLIED"
    assert (await _claim(store, event_id)).state == ClaimState.APPLIED


async def test_a_living_owner_keeps_its_claim_past_many_leases(pool: Pool) -> None:
    store = PgWebhookStore(pool, lease_seconds=_LEASE)
    event_id = f"evt_{uuid.uuid4().hex}"
    owned = await _claim(store, event_id)
    assert owned.state == ClaimState.OWNED
    renewed = 0
    fourth = asyncio.Event()

    async def renew() -> bool:
        nonlocal renewed
        kept = await store.renew(event_id, owned.token)
        renewed += 1
        if renewed == 4:
            fourth.set()
        return kept

    async with leased(renew, every_seconds=_LEASE / 3):
        # Four renewals: longer than the lease since the claim, and the
        # last one a moment ago.
        await asyncio.wait_for(fourth.wait(), timeout=30)
        assert (await _claim(store, event_id)).state == ClaimState.IN_FLIGHT
    await store.applied(event_id, owned.token)
    assert (await _claim(store, event_id)).state == ClaimState.APPLIED
