"""A mailer process SIGKILLed between the send and the mark, as a process
of its own (``boxoffice mailer``) against a real relay: the relay took the
message, the delivery stays PENDING, and another mailer process sends it
again with the same Message-ID, so the fan ends with one distinct message.

No hook in the mailer: the relay (in the test) holds its answer to DATA
until the test holds the delivery's row, so the mailer's mark waits on that
lock, seen waiting in ``pg_stat_activity``, when the process is killed; the
dead process's statement never commits."""

from __future__ import annotations

import signal
import threading
import uuid
from email.message import EmailMessage
from pathlib import Path

import psycopg
import pytest
import redis.asyncio as aioredis

from boxoffice.runtime import Pool
from mail_svc.model import Kind
from tests.e2e.harness import eventually
from tests.mail.harness import make_booking, publish
from tests.mail.relay import RelayState
from tests.runtime.processes import role_processes
from tests.support import Stores

pytestmark = pytest.mark.slow


async def _mark_waiting(stores: Stores) -> bool | None:
    """Whether a statement marking a delivery waits on a lock."""
    async with await psycopg.AsyncConnection.connect(stores.database_url, autocommit=True) as conn:
        cur = await conn.execute(
            """
            SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'
               AND query LIKE '%UPDATE mail_deliveries%'
            """
        )
        row = await cur.fetchone()
    return True if row is not None and row[0] else None


async def test_a_mailer_killed_between_send_and_mark_leaves_one_distinct_message(
    stores: Stores,
    pool: Pool,
    redis: aioredis.Redis,
    relay: tuple[int, RelayState],
    environ: dict[str, str],
    tmp_path: Path,
) -> None:
    _, state = relay
    answer = threading.Event()
    state.hold_data = answer
    stream = f"mail-kill-{uuid.uuid4().hex[:12]}"
    settings = {**environ, "BOXOFFICE_TICKET_STREAM": stream, "BOXOFFICE_MAIL_TICKETS_WAIT_SECONDS": "5"}
    # Its own address: the mailers also send what other tests of this
    # database left due (a transfer's claim link, say) to this relay.
    address = f"kill-{uuid.uuid4().hex[:12]}@example.test"
    booking = await make_booking(pool, email=address)
    await publish(redis, stream, booking)

    def ours() -> list[EmailMessage]:
        return [m for m in state.messages() if m["To"] == address]

    async with role_processes(stores, [("mailer", settings)], tmp_path) as (doomed,):
        # The relay has the message and keeps the mailer waiting for its 250.
        await eventually(lambda: _received(state, address), "the relay taking the message", seconds=60)
        async with await psycopg.AsyncConnection.connect(stores.database_url) as locker:
            await locker.execute(
                "SELECT 1 FROM mail_deliveries WHERE hold_id = %s AND kind = %s FOR UPDATE",
                (booking.hold_id, Kind.TICKETS.value),
            )
            answer.set()
            await eventually(lambda: _mark_waiting(stores), "the mailer's mark waiting on the row", seconds=30)
            doomed.process.send_signal(signal.SIGKILL)
            await doomed.process.wait()
            await locker.rollback()
    assert await _delivery(pool, booking.hold_id) == ("PENDING", 0)
    assert len(ours()) == 1
    # Another mailer takes the dead one's entry over once it has been idle
    # (its resend sweep, which would also find the delivery left PENDING,
    # is kept out of the way: one path resends here).
    survivor = {**settings, "BOXOFFICE_CONSUMER_CLAIM_IDLE_MS": "500", "BOXOFFICE_MAIL_SWEEP_SECONDS": "600"}
    async with role_processes(stores, [("mailer", survivor)], tmp_path):
        await eventually(lambda: _sent(pool, booking.hold_id), "the survivor sending it", seconds=60)
    messages = ours()
    assert len(messages) == 2
    assert len({m["Message-ID"] for m in messages}) == 1
    assert await _delivery(pool, booking.hold_id) == ("SENT", 1)


async def _received(state: RelayState, address: str) -> bool | None:
    return True if any(address in item.recipients for item in state.received) else None


async def _delivery(pool: Pool, hold_id: str) -> tuple[str, int] | None:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT state, attempts FROM mail_deliveries WHERE hold_id = %s AND kind = 'tickets'", (hold_id,)
        )
        row = await cur.fetchone()
    return None if row is None else (row[0], row[1])


async def _sent(pool: Pool, hold_id: str) -> bool | None:
    return True if await _delivery(pool, hold_id) == ("SENT", 1) else None
