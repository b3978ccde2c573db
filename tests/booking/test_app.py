"""The composition root: both roles build and run, `boxoffice up`'s demo
event is seeded once, and the metrics count."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from booking_svc import app
from booking_svc.config import BookingConfig
from booking_svc.jobs.gauges import SeatGauges
from booking_svc.metrics import BookingMetrics
from boxoffice.lifecycle import Loop
from boxoffice.server import GrpcServer
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as pb_grpc
from tests.booking.harness import booking_server, create_event, general, hold_request, query
from tests.support import ManualClock, Stores, client_channel, make_runtime, running


async def test_roles_build_serve_and_seed_the_demo_event_once(stores: Stores) -> None:
    rt = make_runtime(stores)
    server = await app.build(rt, "server")
    sweeper = await app.build(rt, "sweeper")
    assert isinstance(server[0], GrpcServer) and isinstance(server[1], Loop)
    assert [type(c) for c in sweeper] == [Loop]
    async with running([*rt.infrastructure(), *server, *sweeper]):
        first = await app.seed_demo(rt)
        second = await app.seed_demo(rt)
        assert len(first) == 1 and len(second) == 1 and "is there" in second[0]
        async with client_channel(stores, server[0].address) as channel:
            stub = pb_grpc.BookingServiceStub(channel)
            event = (await stub.GetEvent(pb.GetEventRequest(event_id=1))).event
            assert {s.section_id for s in event.sections} >= {"A", "B", "C", "FLOOR"}
            assert sum(s.capacity for s in event.sections if s.kind == pb.SECTION_KIND_SEATED) >= 3000


async def test_the_sweeper_role_expires_lapsed_holds_in_the_background(stores: Stores) -> None:
    clock = ManualClock()
    rt = make_runtime(stores, environ={"BOXOFFICE_BOOKING_SWEEP_INTERVAL_SECONDS": "0.05"}, clock=clock)
    async with booking_server(stores) as booking:
        event = await create_event(booking, [general("G", 10)])
        hold = (
            await booking.stub.HoldSeats(
                hold_request(booking.token("c", event.event_id), event.event_id, section="G", quantity=3)
            )
        ).hold
        clock.advance(3600)  # the sweeper's clock is an hour ahead
        sweeper = await app.build(rt, "sweeper")
        async with running([*rt.infrastructure(), *sweeper]):
            for _ in range(200):
                rows = await query(booking, "SELECT state FROM holds WHERE hold_id = %s", (hold.hold_id,))
                if rows[0][0] == "EXPIRED":
                    break
                await asyncio.sleep(0.05)
        assert rows[0][0] == "EXPIRED"
        released = rt.registry.get_sample_value("boxoffice_booking_sweeper_released_holds_total")
        assert released is not None and released >= 1
        totals = await query(booking, "SELECT held FROM section_totals WHERE event_id = %s", (event.event_id,))
        assert totals[0][0] == 0


async def test_metrics_count_holds_and_seats(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [general("G", 10)])
        await booking.stub.HoldSeats(
            hold_request(booking.token("c", event.event_id), event.event_id, section="G", quantity=2)
        )
        await booking.stub.HoldSeats(
            hold_request(booking.token("c", event.event_id), event.event_id, section="G", quantity=2)
        )
        registry = booking.rt.registry
        assert registry.get_sample_value("boxoffice_booking_holds_total", {"result": "held"}) == 2
        assert registry.get_sample_value("boxoffice_booking_hold_seconds_count") == 2
        metrics = BookingMetrics.create(CollectorRegistry())
        store = app.build_store(booking.rt.pool(), BookingConfig.from_env(booking.rt.env))
        await SeatGauges(store, metrics, booking.clock, interval_seconds=1, sections=100_000).refresh()
        labels = (str(event.event_id), "G")
        assert metrics.seats.labels(*labels, "held")._value.get() == 4
        assert metrics.seats.labels(*labels, "available")._value.get() == 6


def _series(metrics: BookingMetrics) -> set[tuple[str, str]]:
    return {
        (sample.labels["event_id"], sample.labels["section_id"])
        for family in metrics.seats.collect()
        for sample in family.samples
    }


async def test_seat_gauges_follow_the_soonest_sections_of_events_not_yet_started(stores: Stores) -> None:
    """At most the configured number of sections have series, those of the
    events that start soonest; the rest are counted as left out; a section
    whose event has started loses its series."""
    async with booking_server(stores) as booking:
        events = [await create_event(booking, [general("G", 10), general("H", 5)]) for _ in range(3)]
        # Every event of this test starts at the same time (the booking's
        # clock stands still): the soonest sections are the lowest ids.
        starts = events[0].starts_at.ToDatetime(tzinfo=UTC)
        assert all(e.starts_at == events[0].starts_at for e in events)
        # In the gauges' order: event ids as numbers, then sections.
        ours = [(str(e), s) for e, s in sorted((e.event_id, s) for e in events for s in ("G", "H"))]
        metrics = BookingMetrics.create(CollectorRegistry())
        store = app.build_store(booking.rt.pool(), BookingConfig.from_env(booking.rt.env))
        # The gauges' clock a moment before the events start: sections of
        # events starting later (other tests') come after ours.
        clock = ManualClock(starts.timestamp() - 0.001)
        gauges = SeatGauges(store, metrics, clock, interval_seconds=1, sections=4)
        await gauges.refresh()
        (later,) = await query(
            booking,
            "SELECT count(*) FROM sections sc JOIN events e USING (event_id) WHERE e.starts_at > %s",
            (datetime.fromtimestamp(clock.now(), UTC),),
        )
        assert _series(metrics) == set(ours[:4])
        assert metrics.seat_gauges_omitted._value.get() == later[0] - 4
        assert later[0] >= 6
        # Once the events have started, their series are gone.
        clock.advance(1.0)
        await gauges.refresh()
        assert not _series(metrics) & set(ours)
