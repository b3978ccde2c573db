"""I4: after opening, admission order is join order; before it, arrivals
are shuffled uniformly (a statistical test with a control that fails it),
by the event's verifiable draw: the queue's order is exactly the order
:mod:`boxoffice.draw` computes from the seed and the fans' pseudonyms."""

from __future__ import annotations

import asyncio
import itertools
import secrets

import redis.asyncio as aioredis

from boxoffice import draw
from queue_svc.model import PRE_QUEUE_BAND
from queue_svc.ports import FanOp, JoinStatus, QueueStore
from tests.queue.harness import MINUTE_MS, NO_LIMITS, keys_of, members, new_event_id, queue_app, room_config
from tests.support import Stores

NOW = 1_900_000_000_000

# Independence of arrival order and queue order: a 10 x 10 contingency table
# (arrival decile x queue decile) of 5,000 fans, 50 expected per cell. The
# chi-square statistic has 81 degrees of freedom; P(chi2 > 182) = 1e-9, so a
# uniform shuffle fails this test once in a billion runs whatever the seed.
FANS = 5000
BINS = 10
CHI2_BOUND_P_1E9_DF81 = 182.0


def uniform_pre_queue_score() -> int:
    """A score of the pre-queue band from the OS's CSPRNG (for joins made
    on the store directly, without a draw)."""
    return secrets.randbelow(PRE_QUEUE_BAND)


def independence_chi2(arrival_by_rank: list[int]) -> float:
    """Chi-square of arrival decile against queue decile."""
    n = len(arrival_by_rank)
    table = [[0] * BINS for _ in range(BINS)]
    for rank, arrival in enumerate(arrival_by_rank):
        table[arrival * BINS // n][rank * BINS // n] += 1
    expected = n / (BINS * BINS)
    return sum((cell - expected) ** 2 / expected for row in table for cell in row)


async def _pre_queue_order(store: QueueStore, client: aioredis.Redis, scores: list[int]) -> list[int]:
    """Join FANS fans before opening, fan i with scores[i]; their arrival
    indexes in queue order."""
    event_id = new_event_id()
    await store.put_config(room_config(event_id, opens_at_ms=NOW + MINUTE_MS))
    for start in range(0, FANS, 500):
        replies = await asyncio.gather(
            *(
                store.join(event_id, f"fan{i}", "", now_ms=NOW, random_score=scores[i], limits=NO_LIMITS)
                for i in range(start, min(start + 500, FANS))
            )
        )
        assert all(r.status is JoinStatus.WAITING and r.score < PRE_QUEUE_BAND for r in replies)
    queued = await members(client, keys_of(event_id).queue)
    assert len(queued) == FANS
    return [int(member.removeprefix("fan")) for member in queued]


async def test_pre_queue_order_is_the_seeded_draw_and_a_uniform_shuffle(stores: Stores) -> None:
    """FANS fans join through the service's use case before opening: the
    queue's order is the draw's order (score of each fan's pseudonym under
    the room's seed), and it is independent of arrival order."""
    async with queue_app(stores) as queue:
        event_id = new_event_id()
        now_ms = int(queue.rt.clock.now() * 1000)
        await queue.handler.create_waiting_room(room_config(event_id, opens_at_ms=now_ms + 10 * MINUTE_MS))
        record = await queue.draws.get_or_create(event_id)
        assert record is not None
        pseudonyms: dict[str, str] = {}
        for start in range(0, FANS, 500):
            names = [f"fan{i}" for i in range(start, min(start + 500, FANS))]
            joined = await asyncio.gather(*(queue.handler.join(event_id, name, "") for name in names))
            for name, each in zip(names, joined, strict=True):
                assert each.newly_joined and each.position.score < PRE_QUEUE_BAND
                pseudonyms[name] = each.pseudonym
        queued = await members(queue.rt.redis(), keys_of(event_id).queue)

    # The pseudonyms are the draw's, and the order is the draw's order.
    assert all(p == draw.pseudonym(record.secrets.pseudonym_key, event_id, n) for n, p in pseudonyms.items())
    by_pseudonym = {p: n for n, p in pseudonyms.items()}
    expected = [by_pseudonym[e.pseudonym] for e in draw.draw(record.secrets.seed, event_id, pseudonyms.values())]
    assert queued == expected
    order = [int(member.removeprefix("fan")) for member in queued]
    assert sorted(order) == list(range(FANS))
    assert independence_chi2(order) < CHI2_BOUND_P_1E9_DF81


def test_the_draw_function_alone_is_a_uniform_shuffle() -> None:
    """The seeded function itself, on the pseudonyms of FANS fans in
    arrival order, for a few fresh seeds: the chi-square test passes."""
    for _ in range(3):
        seed, key, event_id = secrets.token_bytes(32), secrets.token_bytes(32), new_event_id()
        arrivals = [draw.pseudonym(key, event_id, f"fan{i}") for i in range(FANS)]
        index = {p: i for i, p in enumerate(arrivals)}
        order = [index[e.pseudonym] for e in draw.draw(seed, event_id, arrivals)]
        assert independence_chi2(order) < CHI2_BOUND_P_1E9_DF81


async def test_control_a_biased_pre_queue_fails_the_shuffle_test(stores: Stores) -> None:
    """Scores that lean on arrival (early arrivals drawn from a lower half of
    the band 75% of the time) must fail the same test."""
    half = PRE_QUEUE_BAND // 2
    biased = [
        (uniform_pre_queue_score() % half) + (half if (i < FANS // 2) == (uniform_pre_queue_score() % 4 == 0) else 0)
        for i in range(FANS)
    ]
    async with queue_app(stores) as queue:
        order = await _pre_queue_order(queue.store, queue.rt.redis(), biased)
    assert independence_chi2(order) > CHI2_BOUND_P_1E9_DF81


async def test_admission_order_is_join_order_after_opening(stores: Stores) -> None:
    async with queue_app(stores) as queue:
        store, redis_client = queue.store, queue.rt.redis()
        event_id = new_event_id()
        await store.put_config(
            room_config(
                event_id,
                opens_at_ms=NOW + MINUTE_MS,
                admission_rate_per_second=7,
                max_active_shoppers=10_000,
                claim_grace_ms=60 * MINUTE_MS,
            )
        )
        # 40 pre-queue arrivals (shuffled among themselves), then 160 after opening, one by one.
        pre = [f"pre{i}" for i in range(40)]
        for name in pre:
            await store.join(event_id, name, "", now_ms=NOW, random_score=uniform_pre_queue_score(), limits=NO_LIMITS)
        post = [f"post{i}" for i in range(160)]
        for name in post:
            reply = await store.join(
                event_id, name, "", now_ms=NOW + MINUTE_MS, random_score=uniform_pre_queue_score(), limits=NO_LIMITS
            )
            assert reply.status is JoinStatus.WAITING
        pre_order = await members(redis_client, keys_of(event_id).queue, 0, 39)
        assert sorted(pre_order) == sorted(pre)
        expected = pre_order + post

        admitted_so_far: list[str] = []
        for tick in itertools.count():
            result = await store.admit(event_id, now_ms=NOW + MINUTE_MS + tick * 1000, epoch=1)
            assert result is not None
            admitted_now = set(await members(redis_client, keys_of(event_id).admitted))
            # Exactly the first fans in join order, whatever the tick.
            assert admitted_now == set(expected[: len(admitted_now)])
            admitted_so_far = expected[: len(admitted_now)]
            if len(admitted_now) == len(expected):
                break
        assert admitted_so_far == expected
        last = await store.fan(event_id, expected[-1], now_ms=NOW + 2 * MINUTE_MS, op=FanOp.LOOK)
        assert last is not None and last.state.name == "ADMITTED"
