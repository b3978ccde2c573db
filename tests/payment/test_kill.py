"""`boxoffice relay` and `boxoffice issuer` as real processes, SIGKILLed at
random moments while bookings keep committing: once they run again, every
outbox row is published and every booking has exactly its tickets."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import uuid

import pytest

from boxoffice import db
from boxoffice.runtime import Pool
from tests.payment.harness import insert_outbox, new_event_id
from tests.support import MESH_SECRETS, Stores, tls_environ

pytestmark = pytest.mark.slow

_BOOKINGS = 40


def _spawn(command: str, env: dict[str, str], stores: Stores) -> subprocess.Popen[bytes]:
    """``boxoffice <command>`` with the certificate of the role of that name."""
    return subprocess.Popen(
        [sys.executable, "-m", "boxoffice_cli", command],
        env={**env, **tls_environ(stores.pki.files(command))},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


async def _counts(pool: Pool, holds: list[str], event_id: int) -> tuple[int, int, int]:
    async with db.transaction(pool) as conn:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE published_at IS NULL), count(*) FROM outbox WHERE aggregateid = ANY(%s)",
            (holds,),
        )
        outbox = await cur.fetchone()
        cur = await conn.execute("SELECT count(*) FROM tickets WHERE event_id = %s", (event_id,))
        tickets = await cur.fetchone()
    assert outbox is not None and tickets is not None
    return int(outbox[0]), int(outbox[1]), int(tickets[0])


async def test_killed_relay_and_issuer_lose_and_duplicate_nothing(stores: Stores, pool: Pool) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": stores.database_url,
        "REDIS_URL": stores.redis_url,
        "BOXOFFICE_TICKET_STREAM": f"ticket-issued-kill-{uuid.uuid4().hex[:12]}",
        "BOXOFFICE_METRICS_PORT": "0",
        "BOXOFFICE_HEALTH_PORT": "off",
        "BOXOFFICE_CONSUMER_CLAIM_IDLE_MS": "300",
        "BOXOFFICE_CONSUMER_BLOCK_MS": "100",
        "BOXOFFICE_RELAY_BATCH_SIZE": "3",
        "BOXOFFICE_LOG_LEVEL": "error",
        "BOXOFFICE_DB_POOL_MIN": "1",
        "BOXOFFICE_DB_POOL_MAX": "4",
        **MESH_SECRETS,
    }
    event_id = new_event_id()
    holds = [str(uuid.uuid4()) for _ in range(_BOOKINGS)]
    rng = random.Random(7)

    async def bookings() -> None:
        for i, hold in enumerate(holds):
            payload = {
                "event_id": event_id,
                "hold_id": hold,
                "customer_id": f"k{i}",
                "section_id": "A",
                "seats": [{"seat_id": 2 * i + 1, "label": "a"}, {"seat_id": 2 * i + 2, "label": "b"}],
                "quantity": 2,
                "payment_id": str(uuid.uuid4()),
                "amount_minor": 100,
                "currency": "EUR",
            }
            await insert_outbox(pool, hold, "BookingConfirmed", payload)
            await asyncio.sleep(0.05)

    writer = asyncio.ensure_future(bookings())
    relay, issuer = _spawn("relay", env, stores), _spawn("issuer", env, stores)
    try:
        for round_ in range(8):
            await asyncio.sleep(rng.uniform(0.8, 2.0))
            if round_ % 2 == 0:
                _kill(relay)
                relay = _spawn("relay", env, stores)
            else:
                _kill(issuer)
                issuer = _spawn("issuer", env, stores)
        await writer
        for _ in range(300):
            unpublished, rows, tickets = await _counts(pool, holds, event_id)
            if unpublished == 0 and tickets >= 2 * _BOOKINGS:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # anything duplicated would land by now
    finally:
        writer.cancel()
        for proc in (relay, issuer):
            _kill(proc)
    unpublished, rows, tickets = await _counts(pool, holds, event_id)
    assert (unpublished, rows, tickets) == (0, _BOOKINGS, 2 * _BOOKINGS)
    async with db.transaction(pool) as conn:
        cur = await conn.execute(
            "SELECT hold_id::text, array_agg(seat_id ORDER BY unit) FROM tickets WHERE event_id = %s GROUP BY 1",
            (event_id,),
        )
        per_hold = {row[0]: row[1] for row in await cur.fetchall()}
    assert per_hold == {hold: [2 * i + 1, 2 * i + 2] for i, hold in enumerate(holds)}
