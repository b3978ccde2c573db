"""A door scan racing a transfer's claim, on the real mesh: the claim
re-issues the ticket with a new code and voids the old one, and scans of the
old code at that moment must never both admit and let the claim through.
Either the claim fails TICKET_CHECKED_IN (a scan came first) or every scan
of the old code is VOID (the claim came first); the new code admits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client import CollectorRegistry

from boxoffice import db, ticketcodes
from boxoffice.clock import SystemClock
from boxoffice.env import Env
from boxoffice.runtime import Pool
from checkin_svc.adapters.postgres import PgCheckInStore
from checkin_svc.handler import CheckInHandler
from checkin_svc.metrics import CheckInMetrics
from checkin_svc.model import Scan, ScanResult
from tests.checkin.harness import EventsAllowing
from tests.edge.harness import EdgeStack, edge_stack, error_of
from tests.edge.transfer_fans import buy_tickets, claim, claim_secret, offer, signed_in
from tests.support import Stores

pytestmark = pytest.mark.slow

SCANS = 24


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-transfer-door") as opened:
        yield opened


@contextlib.asynccontextmanager
async def _pool(stores: Stores) -> AsyncIterator[Pool]:
    """The door's pool, a connection for each scan from the start."""
    pool = db.create_pool(stores.database_url, min_size=SCANS + 1, max_size=SCANS + 1, name="test-door")
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()


async def _customer(client: httpx.AsyncClient) -> str:
    reply = await client.get("/v1/session")
    assert reply.status_code == 200, reply.text
    return str(reply.json()["customerId"])


async def _waiting_on_locks(
    conn: psycopg.AsyncConnection[Any], count: int, calls: Sequence[asyncio.Future[Any]] = (), *, event: str = "%"
) -> None:
    """Returns once ``count`` other backends of this database wait on a lock
    (of the kind ``event`` names), or ``calls`` are all done without
    waiting (a condition polled, not a delay)."""
    for _ in range(2000):
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event LIKE %s "
            "AND datname = current_database() AND pid <> pg_backend_pid()",
            (event,),
        )
        row = await cur.fetchone()
        if (row is not None and int(row[0]) >= count) or (calls and all(c.done() for c in calls)):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{count} backends never waited on a lock")


def _outcome(claimed: httpx.Response, results: list[ScanResult]) -> str:
    admitted = results.count(ScanResult.ADMITTED)
    assert admitted <= 1, results
    if claimed.status_code == 200:
        # The claim went through: the old code admitted nobody.
        assert admitted == 0, ("admitted and transferred", results)
        assert set(results) == {ScanResult.VOID}, results
        return "claimed"
    assert error_of(claimed) == (400, "FAILED_PRECONDITION", "TICKET_CHECKED_IN"), claimed.text
    assert admitted == 1, results
    assert set(results) <= {ScanResult.ADMITTED, ScanResult.ALREADY_CHECKED_IN}, results
    return "scanned"


async def test_scans_of_the_old_code_racing_a_claim_never_both_admit_and_transfer(
    stack: EdgeStack, stores: Stores
) -> None:
    keys = ticketcodes.read_keys(Env({})).get()
    clock = SystemClock()
    verifier = ticketcodes.TicketCodeVerifier(keys.public, clock)
    async with _pool(stores) as pool, signed_in(stack, "sender", "friend") as (sender, friend):
        door = CheckInHandler(
            PgCheckInStore(pool),
            verifier,
            clock,
            EventsAllowing(),
            CheckInMetrics.create(CollectorRegistry()),
            EventsAllowing(set()),
        )
        friend_id = await _customer(friend)

        async def scan(event_id: int, code: str) -> ScanResult:
            return (await door.scan(Scan(event_id, code, "north-1", "d1", datetime.now(UTC)))).result

        # The window held open: the claim has read that the ticket was not
        # admitted and locked it, and waits on the friend's own lock in the
        # event (held here) while the scans of the old code arrive; then it
        # goes on. The scans wait for the claim and find the old code void.
        event_id = await stack.event(seats=4)
        (ticket,) = await buy_tickets(sender, event_id, 1)
        transfer = await offer(sender, ticket["ticketId"])
        secret = await claim_secret(stores, transfer["transferId"])
        async with await psycopg.AsyncConnection.connect(stores.database_url) as blocker:
            async with blocker.transaction():
                await blocker.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 8))", (f"{event_id}:{friend_id}",)
                )
                claiming = asyncio.ensure_future(claim(friend, transfer["transferId"], secret))
                await _waiting_on_locks(blocker, 1, event="advisory")
                scanning = [asyncio.ensure_future(scan(event_id, ticket["code"])) for _ in range(SCANS)]
                await _waiting_on_locks(blocker, 1 + SCANS, scanning)
            claimed = await claiming
            results = list(await asyncio.gather(*scanning))
        assert _outcome(claimed, results) == "claimed"
        assert await scan(event_id, claimed.json()["ticket"]["code"]) is ScanResult.ADMITTED

        # And free-running: the claim and many scans of the old code at
        # once, ticket after ticket; whichever wins, never both.
        outcomes = []
        for _ in range(4):
            event_id = await stack.event(seats=4)
            (ticket,) = await buy_tickets(sender, event_id, 1)
            transfer = await offer(sender, ticket["ticketId"])
            secret = await claim_secret(stores, transfer["transferId"])
            claimed, *scanned = await asyncio.gather(
                claim(friend, transfer["transferId"], secret),
                *(scan(event_id, ticket["code"]) for _ in range(SCANS)),
            )
            outcomes.append(_outcome(claimed, list(scanned)))
        assert set(outcomes) <= {"claimed", "scanned"}
