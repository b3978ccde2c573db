"""Lanes: a waiting room with a presale (by access code), a members lane
(open) and a staff lane (by staff pass) besides the general one, each with
its own opening, pre-queue and share, all under the one cap on active
shoppers; against real Redis and Postgres, with two admitters racing."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any, cast

import pytest

from boxoffice.errors import BoxofficeError
from queue_svc import passes
from queue_svc.app import QueueApp
from queue_svc.lanes import LaneDoor
from queue_svc.model import PRE_QUEUE_BAND, Lane, LaneEntry, QueueState, WaitingRoomConfig, lane_problems
from queue_svc.ports import CodeBatch, FanOp, JoinStatus, WaitingRoomRepository
from tests.queue.harness import (
    MINUTE_MS,
    NO_LIMITS,
    Race,
    build_app,
    keys_of,
    members,
    new_event_id,
    queue_app,
    race_room,
    room_config,
    started,
)
from tests.queue.test_fairness import CHI2_BOUND_P_1E9_DF81, independence_chi2
from tests.support import ManualClock, Stores

LANES = (
    Lane("presale", LaneEntry.CODE, 30),
    Lane("members", LaneEntry.OPEN, 20),
    Lane("staff", LaneEntry.STAFF, 10),
)


@pytest.fixture
async def queue(stores: Stores) -> Any:
    async with queue_app(stores) as queue:
        yield queue


async def _room(queue: QueueApp, **changes: Any) -> int:
    event_id = new_event_id()
    now_ms = int(queue.rt.clock.now() * 1000)
    settings: dict[str, Any] = {"opens_at_ms": now_ms - 1000, "lanes": LANES, **changes}
    await queue.handler.create_waiting_room(room_config(event_id, **settings))
    return event_id


async def _codes(queue: QueueApp, event_id: int, *, count: int = 1, max_uses: int = 1, **window: int) -> list[str]:
    now_ms = int(queue.rt.clock.now() * 1000)
    codes = [passes.new_code() for _ in range(count)]
    batch = CodeBatch(
        event_id,
        "presale",
        max_uses,
        window.get("valid_from_ms", now_ms - MINUTE_MS),
        window.get("valid_until_ms", now_ms + 60 * MINUTE_MS),
        "test",
    )
    await queue.codes.create(batch, [passes.code_hash(code) for code in codes])
    return codes


async def _refused(call: Any) -> BoxofficeError:
    try:
        await call
    except BoxofficeError as err:
        return err
    raise AssertionError("the call succeeded")


def test_lane_settings_are_checked() -> None:
    base = room_config(1, opens_at_ms=10_000)
    assert lane_problems(dataclasses.replace(base, lanes=LANES)) == []
    bad = {
        "name": (Lane("Pre Sale", LaneEntry.OPEN, 10),),
        "general": (Lane("general", LaneEntry.OPEN, 10),),
        "twice": (Lane("a", LaneEntry.OPEN, 10), Lane("a", LaneEntry.OPEN, 10)),
        "share": (Lane("a", LaneEntry.OPEN, 0),),
        "all of it": (Lane("a", LaneEntry.OPEN, 60), Lane("b", LaneEntry.OPEN, 40)),
        "later": (Lane("a", LaneEntry.OPEN, 10, opens_at_ms=20_000),),
        "two staff": (Lane("a", LaneEntry.STAFF, 10), Lane("b", LaneEntry.STAFF, 10)),
    }
    for case, lanes in bad.items():
        assert lane_problems(dataclasses.replace(base, lanes=lanes)), case


async def test_a_code_opens_its_lane_for_the_first_account_only(queue: QueueApp) -> None:
    event_id = await _room(queue)
    (code,) = await _codes(queue, event_id)
    handler = queue.handler
    ann = await handler.join(event_id, "ann", "", lane="presale", access_code=code.lower().replace("-", ""))
    assert ann.newly_joined and ann.position.lane == "presale"
    assert await queue.rt.redis().zscore(keys_of(event_id).queue, "ann") is None  # not in the general queue
    # Joining again with it is no new use.
    again = await handler.join(event_id, "ann", "", lane="presale", access_code=code)
    assert not again.newly_joined and again.position.lane == "presale"
    # A second account is refused, and nothing of it is queued.
    err = await _refused(handler.join(event_id, "bob", "", lane="presale", access_code=code))
    assert (err.code.name, err.reason, err.metadata["max_uses"]) == ("PERMISSION_DENIED", "ACCESS_CODE_USED", "1")
    bob = await handler.position(event_id, "bob")
    assert bob.state is QueueState.NOT_IN_QUEUE


async def test_a_code_is_needed_and_must_be_the_lanes_and_valid_now(queue: QueueApp) -> None:
    event_id = await _room(queue)
    other_event = await _room(queue)
    (foreign,) = await _codes(queue, other_event)
    now_ms = int(queue.rt.clock.now() * 1000)
    (expired,) = await _codes(queue, event_id, valid_from_ms=now_ms - 2 * MINUTE_MS, valid_until_ms=now_ms - 1)
    (later,) = await _codes(queue, event_id, valid_from_ms=now_ms + MINUTE_MS)
    handler = queue.handler
    cases = {
        "": "ACCESS_CODE_REQUIRED",
        "not-a-code": "ACCESS_CODE_INVALID",
        passes.new_code(): "ACCESS_CODE_INVALID",
        foreign: "ACCESS_CODE_INVALID",
        expired: "ACCESS_CODE_INVALID",
        later: "ACCESS_CODE_INVALID",
    }
    for code, reason in cases.items():
        err = await _refused(handler.join(event_id, "ann", "", lane="presale", access_code=code))
        assert (err.code.name, err.reason) == ("PERMISSION_DENIED", reason), code
    err = await _refused(handler.join(event_id, "ann", "", lane="vip"))
    assert (err.code.name, err.reason) == ("NOT_FOUND", "LANE_NOT_FOUND")
    assert (await handler.position(event_id, "ann")).state is QueueState.NOT_IN_QUEUE
    # Each refusal is counted for the on-sale report (an unknown lane is no door's refusal).
    counted = await queue.rt.redis().hgetall(keys_of(event_id).refusals)
    assert counted == {b"access_code_required": b"1", b"access_code_invalid": b"5"}
    # The foreign code was not used up by those attempts.
    assert (await handler.join(other_event, "cy", "", lane="presale", access_code=foreign)).newly_joined


async def test_a_multi_use_code_binds_that_many_accounts_even_at_once(queue: QueueApp) -> None:
    event_id = await _room(queue)
    (code,) = await _codes(queue, event_id, max_uses=5)
    outcomes = await asyncio.gather(
        *(queue.handler.join(event_id, f"fan-{i}", "", lane="presale", access_code=code) for i in range(20)),
        return_exceptions=True,
    )
    joined = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BoxofficeError)]
    assert len(joined) == 5 and len(refused) == 15
    assert {e.reason for e in refused} == {"ACCESS_CODE_USED"}
    assert len(await members(queue.rt.redis(), keys_of(event_id, "presale").queue)) == 5


async def test_a_staff_pass_opens_the_staff_lane_and_a_forged_one_does_not(queue: QueueApp) -> None:
    event_id = await _room(queue)
    other_event = await _room(queue)
    staff = queue.staff_passes
    good, _ = staff.issue(event_id, "stage manager", 60_000)
    joined = await queue.handler.join(event_id, "crew-1", "", lane="staff", staff_pass=good)
    assert joined.position.lane == "staff"
    kind, kid, payload, mac = good.split(".")
    foreign, _ = staff.issue(other_event, "stage manager", 60_000)
    expired, _ = staff.issue(event_id, "stage manager", -1)
    access_token, _ = queue.rt.token_signer.issue(event_id=event_id, customer_id="crew-2", ttl_seconds=60)
    cases = {
        "": "signature",
        f"{kind}.{kid}.{payload}.{mac[:-2]}AA": "signature",
        f"{kind}.{kid}.{payload[:-4]}.{mac}": "signature",
        access_token: "signature",
        foreign: "event",
        expired: "expiry",
    }
    for sealed, check in cases.items():
        err = await _refused(queue.handler.join(event_id, "crew-2", "", lane="staff", staff_pass=sealed))
        assert (err.reason, err.metadata["check"]) == ("STAFF_PASS_INVALID", check), sealed[:20]
    # A staff pass is no access token either.
    with pytest.raises(BoxofficeError):
        queue.rt.token_signer.verify(good, event_id=event_id)


async def test_a_staff_pass_is_bound_to_the_first_account_that_uses_it(queue: QueueApp) -> None:
    """One pass put six accounts into the staff lane: it is one person's."""
    event_id = await _room(queue)
    pass_a, _ = queue.staff_passes.issue(event_id, "stage manager", 60_000)
    pass_b, _ = queue.staff_passes.issue(event_id, "lighting", 60_000)
    assert (await queue.handler.join(event_id, "crew-a", "", lane="staff", staff_pass=pass_a)).position.lane == "staff"
    for other in ("crew-b", "crew-c", "crew-d"):
        err = await _refused(queue.handler.join(event_id, other, "", lane="staff", staff_pass=pass_a))
        assert (err.reason, err.metadata["check"]) == ("STAFF_PASS_INVALID", "bound")
    # Its holder joins with it again (a join is idempotent); another pass is another person's.
    again = await queue.handler.join(event_id, "crew-a", "", lane="staff", staff_pass=pass_a)
    assert again.position.lane == "staff"
    assert (await queue.handler.join(event_id, "crew-b", "", lane="staff", staff_pass=pass_b)).position.lane == "staff"
    queued = await members(queue.rt.redis(), keys_of(event_id, "staff").queue)
    assert sorted(queued) == ["crew-a", "crew-b"], queued


async def test_a_fan_is_in_one_lane_at_a_time(queue: QueueApp) -> None:
    event_id = await _room(queue, opens_at_ms=int(queue.rt.clock.now() * 1000) + MINUTE_MS, paused=True)
    handler = queue.handler
    general = await handler.join(event_id, "ann", "")
    assert general.position.lane == ""
    # Waiting in the general lane: a members join answers that place.
    members_join = await handler.join(event_id, "ann", "", lane="members")
    assert (members_join.position.lane, members_join.newly_joined) == ("", False)
    assert members_join.position.score == general.position.score
    # Once gone from it, the fan may move to another lane.
    await handler.leave(event_id, "ann")
    moved = await handler.join(event_id, "ann", "", lane="members")
    assert (moved.position.lane, moved.newly_joined) == ("members", True)
    position = await handler.position(event_id, "ann")
    assert position.state is QueueState.WAITING and position.lane == "members"
    left = await handler.leave(event_id, "ann")
    assert left.state is QueueState.LEFT and left.lane == "members"
    # Racing joins into two lanes end with the fan in exactly one queue.
    await asyncio.gather(*(handler.join(event_id, "bo", "", lane=("members", "")[i % 2]) for i in range(10)))
    client = queue.rt.redis()
    places = [await client.zscore(keys_of(event_id, lane).queue, "bo") for lane in ("", "members")]
    assert sum(p is not None for p in places) == 1


async def test_each_lane_opens_on_its_own_and_shuffles_its_own_pre_queue(queue: QueueApp) -> None:
    """The presale lane opens ten minutes before the general one: before
    its opening arrivals are shuffled (uniform, by the room's draw), after
    it they queue in arrival order; the general lane is still a pre-queue."""
    clock_now = int(queue.rt.clock.now() * 1000)
    lanes = (Lane("early", LaneEntry.OPEN, 40, opens_at_ms=clock_now + 5 * MINUTE_MS),)
    event_id = await _room(queue, opens_at_ms=clock_now + 15 * MINUTE_MS, lanes=lanes)
    fans = 2000
    for start in range(0, fans, 500):
        joined = await asyncio.gather(
            *(queue.handler.join(event_id, f"fan{i}", "", lane="early") for i in range(start, start + 500))
        )
        assert all(j.position.lane == "early" and j.position.score < PRE_QUEUE_BAND for j in joined)
    order = [int(m.removeprefix("fan")) for m in await members(queue.rt.redis(), keys_of(event_id, "early").queue)]
    assert sorted(order) == list(range(fans))
    assert independence_chi2(order) < CHI2_BOUND_P_1E9_DF81


class _CountedRooms:
    """The app's real waiting-room repository, its reads counted."""

    def __init__(self, rooms: WaitingRoomRepository) -> None:
        self._rooms = rooms
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rooms, name)

    async def get(self, event_id: int) -> WaitingRoomConfig | None:
        self.reads += 1
        return await self._rooms.get(event_id)


async def test_a_crowd_joining_a_lane_at_once_reads_the_room_once(queue: QueueApp) -> None:
    """The joins that find the room's configuration stale share one read
    (500 reads at once would queue for the pool's few connections, each
    join's deadline running); one that gives up leaves it to the others."""
    event_id = await _room(queue)
    rooms = _CountedRooms(queue.rooms)
    door = LaneDoor(
        rooms=cast(WaitingRoomRepository, rooms),
        codes=queue.codes,
        staff=queue.staff_passes,
        clock=queue.rt.clock,
    )
    first = asyncio.ensure_future(door.lane(event_id, "members"))
    await asyncio.sleep(0)  # its read has started
    first.cancel()
    views = await asyncio.gather(*(door.lane(event_id, "members") for _ in range(500)))
    assert {v.name for v in views} == {"members"} and rooms.reads == 1
    with pytest.raises(asyncio.CancelledError):
        await first
    assert isinstance(await _refused(door.lane(new_event_id(), "members")), BoxofficeError) and rooms.reads == 2


async def test_after_a_lanes_opening_its_order_is_arrival_order(stores: Stores) -> None:
    clock = ManualClock()
    async with queue_app(stores, clock=clock) as queue:
        now_ms = int(clock.now() * 1000)
        lanes = (Lane("early", LaneEntry.OPEN, 40, opens_at_ms=now_ms - 1000),)
        event_id = await _room(queue, opens_at_ms=now_ms + 15 * MINUTE_MS, lanes=lanes)
        for i in range(30):
            reply = await queue.store.join(
                event_id, f"e{i}", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS, lane="early"
            )
            assert reply.status is JoinStatus.WAITING and reply.score > PRE_QUEUE_BAND
            general = await queue.store.join(
                event_id, f"g{i}", "", now_ms=now_ms, random_score=random.randrange(PRE_QUEUE_BAND), limits=NO_LIMITS
            )
            assert general.score < PRE_QUEUE_BAND  # the general lane is not open yet
        admitted: list[str] = []
        await queue.admitter.refresh()
        for _ in range(20):
            clock.advance(0.1)
            await queue.admitter.tick_event(event_id, epoch=1)
            admitted = await members(queue.rt.redis(), keys_of(event_id).admitted)
        early = [m for m in await members(queue.rt.redis(), keys_of(event_id, "early").queue)]
        assert all(m.startswith("e") for m in admitted) and admitted
        # Admitted in arrival order: the first ones went, the rest wait in order.
        gone = {m for m in admitted}
        assert [f"e{i}" for i in range(30) if f"e{i}" not in gone] == early
        assert {f"e{i}" for i in range(len(gone))} == gone


async def test_busy_lanes_share_the_admissions_by_weight(stores: Stores) -> None:
    """All four lanes have fans waiting; the room admits 100 a second under
    a cap that never binds: over ten seconds each lane gets its share
    (general 40%, presale 30%, members 20%, staff 10%)."""
    clock = ManualClock()
    async with queue_app(stores, clock=clock) as queue:
        now_ms = int(clock.now() * 1000)
        event_id = await _room(queue, admission_rate_per_second=100, max_active_shoppers=100_000)
        store = queue.store
        for lane in ("", "presale", "members", "staff"):
            # Straight into the store: the doors are tested above.
            await asyncio.gather(
                *(
                    store.join(event_id, f"{lane}-{i}", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS, lane=lane)
                    for i in range(800)
                )
            )
        await queue.admitter.refresh()
        for _ in range(100):
            clock.advance(0.1)
            await queue.admitter.tick_event(event_id, epoch=1)
        client = queue.rt.redis()
        left = {lane: await client.zcard(keys_of(event_id, lane).queue) for lane in ("", "presale", "members", "staff")}
        taken = {lane: 800 - n for lane, n in left.items()}
        total = sum(taken.values())
        assert 950 <= total <= 1100, taken
        for lane, share in (("", 0.4), ("presale", 0.3), ("members", 0.2), ("staff", 0.1)):
            assert abs(taken[lane] / total - share) < 0.03, taken


async def test_two_admitters_with_three_lanes_never_exceed_the_cap(stores: Stores) -> None:
    clock = ManualClock()
    cap = 40
    event_id = new_event_id()
    first, second = (build_app(stores, clock=clock) for _ in range(2))
    async with started(first), started(second):
        config = race_room(event_id, clock, cap, lanes=LANES)
        opens_ms = config.opens_at_ms
        await first.handler.create_waiting_room(config)
        for admitter in (first.admitter, second.admitter):
            await admitter.refresh()
        lanes = ("", "presale", "members", "staff")
        await asyncio.gather(
            *(
                (first, second)[i % 2].store.join(
                    event_id, f"fan-{i}", "", now_ms=opens_ms, random_score=0, limits=NO_LIMITS, lane=lanes[i % 4]
                )
                for i in range(2000)
            )
        )
        race = Race(second.rt.redis(), first.store, event_id, clock)

        async def tick_with(index: int) -> int:
            result = await (first, second)[index].admitter.tick_event(event_id, epoch=1)
            assert result is not None and not result.stale_epoch
            assert result.active_shoppers <= cap
            return result.admitted

        admitted = await race.run([lambda: tick_with(0), lambda: tick_with(1)], ticks=200)
        # Churn ends sessions only of fans it finds admitted, in any lane;
        # expiry frees the rest: slots were refilled many times.
        assert admitted > 3 * cap
        assert race.most_seen == cap
        per_lane = []
        for lane in lanes:
            per_lane.append(2000 // 4 - await first.rt.redis().zcard(keys_of(event_id, lane).queue))
        assert all(n > 0 for n in per_lane), per_lane  # every lane got in


async def test_a_lane_fans_place_reads_and_claims_in_its_lane(queue: QueueApp) -> None:
    event_id = await _room(queue)
    await queue.handler.join(event_id, "ann", "", lane="members")
    await queue.admitter.refresh()
    for _ in range(3):
        await queue.admitter.tick_event(event_id, epoch=1)
    place = await queue.store.fan(
        event_id, "ann", now_ms=int(queue.rt.clock.now() * 1000), op=FanOp.LOOK
    )  # the lane is found from the binding
    assert place is not None and place.lane == "members" and place.state is QueueState.ADMITTED
    position = await queue.handler.position(event_id, "ann")
    assert position.state is QueueState.ADMITTED and position.access_token and position.lane == "members"
    progress = await queue.handler.stats(event_id, "members")
    assert progress.lane == "members" and progress.admitted_total == 1
    err = await _refused(queue.handler.stats(event_id, "vip"))
    assert err.reason == "LANE_NOT_FOUND"


async def test_a_code_alone_finds_its_lane_and_a_pass_alone_the_staff_lane(queue: QueueApp) -> None:
    event_id = await _room(queue)
    (code,) = await _codes(queue, event_id)
    joined = await queue.handler.join(event_id, "ann", "", access_code=code)
    assert joined.position.lane == "presale"
    good, _ = queue.staff_passes.issue(event_id, "usher", 60_000)
    assert (await queue.handler.join(event_id, "crew", "", staff_pass=good)).position.lane == "staff"
    err = await _refused(queue.handler.join(event_id, "bob", "", access_code=passes.new_code()))
    assert err.reason == "ACCESS_CODE_INVALID"
    assert (await queue.handler.join(event_id, "bob", "")).position.lane == ""


async def test_a_lanes_joins_say_their_lane_in_the_lifecycle_log(queue: QueueApp) -> None:
    from queue_svc.jobs.lifecycle import parse

    event_id = await _room(queue)
    await queue.handler.join(event_id, "ann", "", lane="members")
    await queue.handler.join(event_id, "bob", "")
    raw = await queue.rt.redis().lrange(keys_of(event_id).lifecycle, 0, -1)
    joined = [parse(i, entry.decode() if isinstance(entry, bytes) else entry) for i, entry in enumerate(raw)]
    lanes = {row.customer_id: row.detail for row in joined if row is not None and row.kind == "joined"}
    assert lanes == {"ann": "members", "bob": None}
