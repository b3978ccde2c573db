"""The outbox relay and the ticket issuer against real Postgres and Redis:
order per order, SKIP LOCKED replicas, late commits, and a crash at each
point (before publish, after publish before marking, after the ticket
before the ack) losing nothing and duplicating nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from booking_svc.jobs.relay import OutboxRelay, OutboxRow, RelayHooks
from booking_svc.metrics import RelayMetrics
from boxoffice import db
from boxoffice.runtime import Pool
from boxoffice.streams import ConsumerHooks, StreamEntry
from tests.payment.harness import IssuerFactory, insert_outbox, issuers, new_event_id, open_redis
from tests.support import Stores


class Crash(BaseException):
    """The process dying at a crash point."""


@pytest.fixture
async def redis_conn(stores: Stores) -> Any:
    async with open_redis(stores) as client:
        yield client


@pytest.fixture
def stream() -> str:
    return f"ticket-issued-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def make_issuer(stores: Stores, stream: str) -> AsyncIterator[IssuerFactory]:
    async with issuers(stores, stream) as make:
        yield make


def _relay(pool: Pool, redis_conn: aioredis.Redis, stream: str, hooks: RelayHooks | None = None) -> OutboxRelay:
    return OutboxRelay(
        pool=pool,
        redis=redis_conn,
        stream=stream,
        groups=["ticket-issuer"],
        metrics=RelayMetrics.create(CollectorRegistry()),
        batch_size=50,
        hooks=hooks,
    )


def _confirmed(hold_id: str, event_id: int, seats: Sequence[int] = (), quantity: int = 0) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "hold_id": hold_id,
        "customer_id": "carol",
        "section_id": "A",
        "seats": [{"seat_id": s, "label": f"A-1-{s}"} for s in seats],
        "quantity": len(seats) or quantity,
        "payment_id": str(uuid.uuid4()),
        "amount_minor": 1000,
        "currency": "EUR",
    }


async def _drain(relay: OutboxRelay) -> int:
    total = 0
    while (n := await relay.publish_once()) > 0:
        total += n
    return total


async def _entries(redis_conn: aioredis.Redis, stream: str, aggregates: Sequence[str]) -> list[tuple[str, str]]:
    """(aggregate, outbox event id) of the stream's entries for these aggregates, in stream order."""
    found: list[tuple[str, str]] = []
    entries: Any = await redis_conn.xrange(stream)
    for _, fields in entries:
        aggregate = fields[b"aggregateid"].decode()
        if aggregate in aggregates:
            found.append((aggregate, fields[b"event_id"].decode()))
    return found


async def _unpublished(pool: Pool, ids: Sequence[str]) -> int:
    async with db.transaction(pool) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM outbox WHERE id = ANY(%s::uuid[]) AND published_at IS NULL", (list(ids),)
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _tickets(pool: Pool, hold_ids: Sequence[str]) -> list[tuple[Any, ...]]:
    async with db.transaction(pool) as conn:
        cur = await conn.execute(
            "SELECT hold_id::text, unit, seat_id, voided_at IS NOT NULL FROM tickets "
            "WHERE hold_id = ANY(%s::uuid[]) ORDER BY hold_id, unit",
            (list(hold_ids),),
        )
        return list(await cur.fetchall())


def _raise_crash() -> Callable[[Any], Awaitable[None]]:
    async def crash(_: Any) -> None:
        raise Crash

    return crash


async def test_relay_publishes_in_order_per_order_and_marks_rows(
    pool: Pool, redis_conn: aioredis.Redis, stream: str
) -> None:
    x, y = str(uuid.uuid4()), str(uuid.uuid4())
    ids = [await insert_outbox(pool, agg, "BookingConfirmed", {"n": i}) for i, agg in enumerate([x, y, x, y, x])]
    registry = CollectorRegistry()
    relay = OutboxRelay(
        pool=pool, redis=redis_conn, stream=stream, groups=["ticket-issuer"], metrics=RelayMetrics.create(registry)
    )
    await relay.prepare()
    await relay.refresh_gauges()
    assert (registry.get_sample_value("boxoffice_outbox_pending") or 0) >= 5
    assert (registry.get_sample_value("boxoffice_outbox_lag_seconds") or 0) >= 0
    await _drain(relay)
    await relay.refresh_gauges()
    assert registry.get_sample_value("boxoffice_outbox_pending") == 0
    assert (registry.get_sample_value("boxoffice_outbox_published_total") or 0) >= 5
    entries = await _entries(redis_conn, stream, [x, y])
    assert sorted(e for _, e in entries) == sorted(ids)  # each once
    assert [e for a, e in entries if a == x] == [ids[0], ids[2], ids[4]]
    assert [e for a, e in entries if a == y] == [ids[1], ids[3]]
    assert await _unpublished(pool, ids) == 0


async def test_relay_crash_before_publish_loses_nothing(pool: Pool, redis_conn: aioredis.Redis, stream: str) -> None:
    hold = str(uuid.uuid4())
    ids = [await insert_outbox(pool, hold, "BookingConfirmed", _confirmed(hold, new_event_id(), quantity=1))]
    with pytest.raises(Crash):
        await _relay(pool, redis_conn, stream, RelayHooks(before_publish=_raise_crash())).publish_once()
    assert await _entries(redis_conn, stream, [hold]) == []
    assert await _unpublished(pool, ids) == 1
    await _drain(_relay(pool, redis_conn, stream))
    assert await _entries(redis_conn, stream, [hold]) == [(hold, ids[0])]
    assert await _unpublished(pool, ids) == 0


async def test_relay_crash_after_publish_redelivers_and_the_issuer_deduplicates(
    pool: Pool, redis_conn: aioredis.Redis, stream: str, make_issuer: IssuerFactory
) -> None:
    hold = str(uuid.uuid4())
    event_id = new_event_id()
    ids = [await insert_outbox(pool, hold, "BookingConfirmed", _confirmed(hold, event_id, seats=[11, 12]))]
    crashing = _relay(pool, redis_conn, stream, RelayHooks(after_publish=_raise_crash()))
    await crashing.prepare()
    with pytest.raises(Crash):
        await crashing.publish_once()
    assert await _unpublished(pool, ids) == 1  # published but never marked
    await _drain(_relay(pool, redis_conn, stream))
    assert await _entries(redis_conn, stream, [hold]) == [(hold, ids[0]), (hold, ids[0])]
    issuer = (await make_issuer("c1")).consumer
    await issuer.prepare()
    while await issuer.read_once() > 0:
        pass
    assert await _tickets(pool, [hold]) == [(hold, 1, 11, False), (hold, 2, 12, False)]


async def test_two_relays_never_publish_a_row_twice(pool: Pool, redis_conn: aioredis.Redis, stream: str) -> None:
    aggregates = [str(uuid.uuid4()) for _ in range(20)]
    ids = [await insert_outbox(pool, agg, "BookingConfirmed", {}) for agg in aggregates]
    published = await _race_two_relays(pool, redis_conn, stream, OutboxRelay, aggregates)
    assert sorted(published) == sorted(ids)


async def test_control_two_relays_without_row_locks_publish_twice(
    pool: Pool, redis_conn: aioredis.Redis, stream: str
) -> None:
    """Control: the same race with the batch read without FOR UPDATE SKIP
    LOCKED publishes rows twice, which the test above would catch."""

    class UnlockedRelay(OutboxRelay):
        batch_sql = OutboxRelay.batch_sql.replace("FOR UPDATE SKIP LOCKED", "")

    assert UnlockedRelay.batch_sql != OutboxRelay.batch_sql

    aggregates = [str(uuid.uuid4()) for _ in range(20)]
    ids = [await insert_outbox(pool, agg, "BookingConfirmed", {}) for agg in aggregates]
    published = await _race_two_relays(pool, redis_conn, stream, UnlockedRelay, aggregates)
    assert len(published) > len(ids)


async def _race_two_relays(
    pool: Pool, redis_conn: aioredis.Redis, stream: str, cls: type[OutboxRelay], aggregates: list[str]
) -> list[str]:
    both_read = asyncio.Barrier(2)

    async def window(rows: Sequence[OutboxRow]) -> None:
        # Each relay has read its batch before either publishes.
        await asyncio.wait_for(both_read.wait(), timeout=1.0)

    def relay(hooks: RelayHooks | None) -> OutboxRelay:
        return cls(
            pool=pool,
            redis=redis_conn,
            stream=stream,
            groups=[],
            metrics=RelayMetrics.create(CollectorRegistry()),
            batch_size=10_000,
            hooks=hooks,
        )

    racing = [relay(RelayHooks(before_publish=window)) for _ in range(2)]
    await asyncio.gather(*(r.publish_once() for r in racing), return_exceptions=True)
    for _ in racing:  # whatever a timed-out window left unpublished
        await _drain(relay(None))
    return [e for _, e in await _entries(redis_conn, stream, aggregates)]


async def test_a_replica_waits_for_an_orders_older_row_held_by_another(
    pool: Pool, redis_conn: aioredis.Redis, stream: str
) -> None:
    x, y = str(uuid.uuid4()), str(uuid.uuid4())
    first_x = await insert_outbox(pool, x, "BookingConfirmed", {})
    entered, release = asyncio.Event(), asyncio.Event()

    async def hold_batch(rows: Sequence[OutboxRow]) -> None:
        entered.set()
        await release.wait()

    slow = _relay(pool, redis_conn, stream, RelayHooks(before_publish=hold_batch))
    slow_run = asyncio.ensure_future(slow.publish_once())
    await entered.wait()  # the slow replica holds first_x, unpublished
    second_x = await insert_outbox(pool, x, "BookingCancelled", {})
    only_y = await insert_outbox(pool, y, "BookingConfirmed", {})
    fast = _relay(pool, redis_conn, stream)
    await _drain(fast)
    assert await _entries(redis_conn, stream, [x, y]) == [(y, only_y)]  # x's newer row waits
    release.set()
    await slow_run
    await _drain(fast)
    assert [e for a, e in await _entries(redis_conn, stream, [x])] == [first_x, second_x]


async def test_a_row_committed_late_is_published(pool: Pool, redis_conn: aioredis.Redis, stream: str) -> None:
    """A row whose sequence number is lower than an already published row's
    (its transaction committed later) is still published."""
    late_agg, early_agg = str(uuid.uuid4()), str(uuid.uuid4())
    late_id = str(uuid.uuid4())
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
            "VALUES (%s, 'booking', %s, 'BookingConfirmed', '{}')",
            (late_id, late_agg),
        )
        early_id = await insert_outbox(pool, early_agg, "BookingConfirmed", {})
        relay = _relay(pool, redis_conn, stream)
        await _drain(relay)
        assert await _entries(redis_conn, stream, [late_agg, early_agg]) == [(early_agg, early_id)]
    await _drain(relay)
    assert await _entries(redis_conn, stream, [late_agg, early_agg]) == [(early_agg, early_id), (late_agg, late_id)]


async def test_issuer_crash_after_ticket_before_ack_is_claimed_without_duplicates(
    pool: Pool, redis_conn: aioredis.Redis, stream: str, make_issuer: IssuerFactory
) -> None:
    holds = [str(uuid.uuid4()) for _ in range(3)]
    event_id = new_event_id()
    for i, hold in enumerate(holds):
        await insert_outbox(pool, hold, "BookingConfirmed", _confirmed(hold, event_id, seats=[100 + i]))
    await _drain(_relay(pool, redis_conn, stream))

    async def crash_on_ours(entry: StreamEntry) -> None:
        if entry.aggregate_id in holds:
            raise Crash

    dying = (await make_issuer("dying", hooks=ConsumerHooks(after_handle=crash_on_ours))).consumer
    await dying.prepare()
    with pytest.raises(Crash):
        await dying.read_once()
    # Tickets are committed, nothing is acknowledged: every entry is still pending.
    assert 1 <= len(await _tickets(pool, holds)) <= 3
    assert (await redis_conn.xpending(stream, "ticket-issuer"))["pending"] >= 3
    surviving = await make_issuer("survivor", claim_idle_ms=1)
    survivor = surviving.consumer
    await asyncio.sleep(0.01)
    await survivor.claim_once()
    while await survivor.read_once() > 0:
        pass
    assert await _tickets(pool, holds) == [(h, 1, 100 + holds.index(h), False) for h in sorted(holds)]
    assert (await redis_conn.xpending(stream, "ticket-issuer"))["pending"] == 0
    assert (surviving.registry.get_sample_value("boxoffice_issuer_entries_claimed_total") or 0) >= 1


async def test_issuer_general_admission_cancellation_and_out_of_order_cancel(
    pool: Pool, redis_conn: aioredis.Redis, stream: str, make_issuer: IssuerFactory
) -> None:
    event_id = new_event_id()
    ga, early_cancel = str(uuid.uuid4()), str(uuid.uuid4())
    await insert_outbox(pool, ga, "BookingConfirmed", _confirmed(ga, event_id, quantity=3))
    await insert_outbox(pool, ga, "BookingCancelled", {"hold_id": ga, "event_id": event_id})
    await _drain(_relay(pool, redis_conn, stream))
    issuing = await make_issuer("c")
    issuer = issuing.consumer
    await issuer.prepare()
    while await issuer.read_once() > 0:
        pass
    assert await _tickets(pool, [ga]) == [(ga, 1, None, True), (ga, 2, None, True), (ga, 3, None, True)]
    # A cancellation handled before its confirmation (two consumers racing)
    # leaves the confirmation's tickets void.
    cancel = StreamEntry("0-1", str(uuid.uuid4()), early_cancel, "BookingCancelled", {"hold_id": early_cancel}, 0.0)
    confirm = StreamEntry(
        "0-2", str(uuid.uuid4()), early_cancel, "BookingConfirmed", _confirmed(early_cancel, event_id, seats=[7]), 0.0
    )
    handler = issuing.handler
    await handler.handle(cancel)
    await handler.handle(confirm)
    await handler.handle(confirm)  # redelivered: nothing new
    assert await _tickets(pool, [early_cancel]) == [(early_cancel, 1, 7, True)]


async def test_issuer_leaves_a_seat_conflict_pending_until_it_resolves(
    pool: Pool, redis_conn: aioredis.Redis, stream: str, make_issuer: IssuerFactory
) -> None:
    event_id = new_event_id()
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    issuing = await make_issuer("c", claim_idle_ms=1)
    issuer, registry = issuing.consumer, issuing.registry
    await issuer.prepare()
    # The seat is issued to the first booking; the second booking's
    # confirmation (the seat was resold) arrives before the first one's
    # cancellation. (Different bookings are issued concurrently, so the two
    # confirmations go through the issuer one after the other.)
    await insert_outbox(pool, first, "BookingConfirmed", _confirmed(first, event_id, seats=[5]))
    await _drain(_relay(pool, redis_conn, stream))
    while await issuer.read_once() > 0:
        pass
    await insert_outbox(pool, second, "BookingConfirmed", _confirmed(second, event_id, seats=[5]))
    await _drain(_relay(pool, redis_conn, stream))
    while await issuer.read_once() > 0:
        pass
    assert await _tickets(pool, [first, second]) == [(first, 1, 5, False)]
    assert registry.get_sample_value("boxoffice_ticket_conflicts_total") == 1
    assert (await redis_conn.xpending(stream, "ticket-issuer"))["pending"] == 1
    # The first booking is cancelled (its seat resold): the retry succeeds.
    await insert_outbox(pool, first, "BookingCancelled", {"hold_id": first})
    await _drain(_relay(pool, redis_conn, stream))
    await issuer.read_once()
    await asyncio.sleep(0.01)
    await issuer.claim_once()
    tickets = await _tickets(pool, [first, second])
    assert sorted(tickets) == sorted([(first, 1, 5, True), (second, 1, 5, False)])
    assert (await redis_conn.xpending(stream, "ticket-issuer"))["pending"] == 0


async def test_relay_and_issuer_on_redis_6_2(
    pool: Pool, embedded_redis_url: str, stream: str, make_issuer: IssuerFactory
) -> None:
    """The same stream commands (XAUTOCLAIM, XTRIM MINID, XINFO) on the
    embedded Redis 6.2: claim what a dead consumer left, then trim what
    every group acknowledged."""
    client = aioredis.Redis.from_url(embedded_redis_url)
    try:
        version = (await client.info("server"))["redis_version"]
        assert str(version).startswith("6.2")
        holds = [str(uuid.uuid4()) for _ in range(2)]
        event_id = new_event_id()
        for i, hold in enumerate(holds):
            await insert_outbox(pool, hold, "BookingConfirmed", _confirmed(hold, event_id, seats=[300 + i]))
        relay = _relay(pool, client, stream)
        await relay.prepare()
        await _drain(relay)

        async def crash_on_ours(entry: StreamEntry) -> None:
            if entry.aggregate_id in holds:
                raise Crash

        hooks = ConsumerHooks(after_handle=crash_on_ours)
        dying = (await make_issuer("dying", hooks=hooks, redis_url=embedded_redis_url)).consumer
        with pytest.raises(Crash):
            await dying.read_once()
        survivor = (await make_issuer("survivor", claim_idle_ms=1, redis_url=embedded_redis_url)).consumer
        await asyncio.sleep(0.01)
        await survivor.claim_once()
        while await survivor.read_once() > 0:
            pass
        assert sorted(t[2] for t in await _tickets(pool, holds)) == [300, 301]
        assert (await client.xpending(stream, "ticket-issuer"))["pending"] == 0
        before = await client.xlen(stream)
        await relay.trim()  # approximate: whole nodes only, so it may keep them all
        assert await client.xlen(stream) <= before
    finally:
        await client.aclose()


async def test_trim_keeps_whatever_a_group_has_not_acknowledged(
    pool: Pool, redis_conn: aioredis.Redis, stream: str
) -> None:
    relay = OutboxRelay(
        pool=pool,
        redis=redis_conn,
        stream=stream,
        groups=["fast", "slow"],
        metrics=RelayMetrics.create(CollectorRegistry()),
    )
    await relay.prepare()
    ids = [await redis_conn.xadd(stream, {"n": str(i)}) for i in range(5)]
    await relay.trim(approximate=False)
    assert await redis_conn.xlen(stream) == 5  # nobody read anything
    for group in ("fast", "slow"):
        await redis_conn.xreadgroup(group, "c", {stream: ">"}, count=5)
    await redis_conn.xack(stream, "fast", *ids)
    await redis_conn.xack(stream, "slow", *ids[:2])
    await relay.trim(approximate=False)
    remaining: Any = await redis_conn.xrange(stream)
    assert [entry_id for entry_id, _ in remaining] == ids[2:]
    await redis_conn.xack(stream, "slow", *ids[2:])
    await relay.trim(approximate=False)
    assert await redis_conn.xlen(stream) == 0


async def test_rows_lost_with_the_stream_are_published_again(
    pool: Pool, redis_conn: aioredis.Redis, stream: str, make_issuer: IssuerFactory
) -> None:
    """Redis loses the stream (no persistence, a failover): once the issuer
    has caught up with what the stream still holds, the relay publishes the
    lost rows again, and their tickets are issued once."""
    event_id = new_event_id()
    holds = [str(uuid.uuid4()) for _ in range(2)]
    relay = OutboxRelay(
        pool=pool,
        redis=redis_conn,
        stream=stream,
        groups=["ticket-issuer"],
        metrics=RelayMetrics.create(CollectorRegistry()),
        repair_group="ticket-issuer",
        repair_after_seconds=0.001,
    )
    await relay.prepare()
    issuer = (await make_issuer("c")).consumer
    await insert_outbox(pool, holds[0], "BookingConfirmed", _confirmed(holds[0], event_id, seats=[400]))
    await _drain(relay)
    while await issuer.read_once() > 0:
        pass
    # The second booking is published, then the stream vanishes before the
    # issuer reads it.
    await insert_outbox(pool, holds[1], "BookingConfirmed", _confirmed(holds[1], event_id, seats=[401]))
    await _drain(relay)
    await redis_conn.delete(stream)
    await relay.trim()  # notices the missing groups and makes them again
    await insert_outbox(pool, str(uuid.uuid4()), "BookingConfirmed", {})
    await _drain(relay)
    assert await relay.repair_lost() == 0  # the issuer is behind: nothing is presumed lost
    while await issuer.read_once() > 0:
        pass
    assert await relay.repair_lost() >= 1
    await _drain(relay)
    while await issuer.read_once() > 0:
        pass
    assert await _tickets(pool, holds) == sorted([(holds[0], 1, 400, False), (holds[1], 1, 401, False)])
    while await issuer.read_once() > 0:
        pass
    assert await relay.repair_lost() == 0


async def test_a_lost_stream_is_noticed_by_its_marker_and_published_again_at_once(
    pool: Pool, redis_conn: aioredis.Redis, stream: str, make_issuer: IssuerFactory
) -> None:
    """Redis loses the stream and its marker while the issuer is behind:
    the relay's next look at the marker (each second while it runs)
    publishes the rows again, without the repair's wait, and their tickets
    are issued once."""
    event_id = new_event_id()
    holds = [str(uuid.uuid4()) for _ in range(2)]
    relay = OutboxRelay(
        pool=pool,
        redis=redis_conn,
        stream=stream,
        groups=["ticket-issuer"],
        metrics=RelayMetrics.create(CollectorRegistry()),
        repair_group="ticket-issuer",
    )
    await relay.prepare()
    assert await relay.check_stream() == 0  # the first look only learns the marker
    assert await relay.check_stream() == 0  # and the marker is unchanged
    issuer = (await make_issuer("c")).consumer
    await insert_outbox(pool, holds[0], "BookingConfirmed", _confirmed(holds[0], event_id, seats=[500]))
    await _drain(relay)
    while await issuer.read_once() > 0:
        pass
    await insert_outbox(pool, holds[1], "BookingConfirmed", _confirmed(holds[1], event_id, seats=[501]))
    await _drain(relay)
    # Lost: the stream and its marker, before the issuer read the second.
    await redis_conn.delete(stream, f"{{{stream}}}:gen")
    # The age-based repair would wait (the control): the row is too recent.
    assert await relay.repair_lost() == 0
    assert await relay.check_stream() == 1
    await _drain(relay)
    while await issuer.read_once() > 0:
        pass
    assert await _tickets(pool, holds) == sorted([(holds[0], 1, 500, False), (holds[1], 1, 501, False)])
    assert await relay.check_stream() == 0
