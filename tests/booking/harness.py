"""A real BookingService on a loopback port against the test Postgres, and
the helpers its tests share: events, tokens, calls, and an audit of the
database against itself and against the answers clients got."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import psycopg
from google.protobuf import duration_pb2, timestamp_pb2

from booking_svc import app
from booking_svc.adapters.postgres import PgBookingStore
from booking_svc.metrics import BookingMetrics
from boxoffice import access
from boxoffice.errors import BoxofficeError, from_rpc_error
from boxoffice.runtime import Runtime
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as pb_grpc
from tests.edge.asserting import edge_mesh_client
from tests.support import ManualClock, Stores, make_runtime, running


@dataclass
class Booking:
    """A running server and what a test needs to talk to it."""

    rt: Runtime
    stub: Any
    clock: ManualClock
    store: PgBookingStore
    metrics: BookingMetrics
    database_url: str
    # The operator's stub, for what only operators may (every customer's holds).
    operator: Any = None
    events: list[int] = field(default_factory=list)

    def token(self, customer_id: str, event_id: int) -> str:
        token, _ = self.rt.token_signer.issue(event_id=event_id, customer_id=customer_id, ttl_seconds=3600)
        return token


@contextlib.asynccontextmanager
async def booking_server(
    stores: Stores,
    *,
    environ: dict[str, str] | None = None,
    race_pause_seconds: float = 0.0,
    store_class: app.StoreClass = PgBookingStore,
) -> AsyncIterator[Booking]:
    """The server role as ``booking_svc.app`` builds it, with the test's
    overrides (a store class, the store's test pause), on a loopback port."""
    clock = ManualClock()
    env = {"BOXOFFICE_DB_POOL_MAX": "30", "BOXOFFICE_BOOKING_SEAT_MAP_MAX_AGE_SECONDS": "0", **(environ or {})}
    rt = make_runtime(stores, environ=env, clock=clock)
    server = app.build_server(rt, app.Overrides(store_class=store_class, race_pause_seconds=race_pause_seconds))
    async with (
        running([*rt.infrastructure(), *server.components]),
        edge_mesh_client(stores, server.grpc.address) as client,
    ):
        # Each call goes as a role the authorization table allows it.
        stub = client.stub(pb_grpc.BookingServiceStub)
        operator = client.stub(pb_grpc.BookingServiceStub, role=access.OPERATOR)
        yield Booking(rt, stub, clock, server.store, server.metrics, stores.database_url, operator)


def new_event_id() -> int:
    return random.randint(10**9, 10**15)


def ts(value: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


def seated(section_id: str, price: int = 5000) -> pb.SectionSpec:
    return pb.SectionSpec(
        section_id=section_id,
        display_name=f"Section {section_id}",
        kind=pb.SECTION_KIND_SEATED,
        price=pb.Money(currency_code="EUR", amount_minor=price),
    )


def general(section_id: str, capacity: int, overbook: int = 0, price: int = 3000) -> pb.SectionSpec:
    return pb.SectionSpec(
        section_id=section_id,
        display_name=f"Section {section_id}",
        kind=pb.SECTION_KIND_GENERAL_ADMISSION,
        capacity=capacity,
        overbook_limit=overbook,
        price=pb.Money(currency_code="EUR", amount_minor=price),
    )


async def create_event(
    booking: Booking,
    sections: Sequence[pb.SectionSpec],
    rows: Sequence[tuple[str, str, int]] = (),
    *,
    kind: pb.EventKind.ValueType = pb.EVENT_KIND_CONCERT,
    max_seats_per_customer: int = 0,
    max_tickets_per_customer: int = 0,
    refund_percent: int = 0,
    refundable_for: timedelta | None = None,
    waitlist_offer_minutes: int = 0,
) -> pb.Event:
    """An event with fresh id; ``rows`` are (section, row label, seats)."""
    event_id = new_event_id()
    now = datetime.fromtimestamp(booking.clock.now(), UTC)
    policy = pb.RefundPolicy(refund_percent=refund_percent)
    if refundable_for is not None:
        policy.refundable_until.CopyFrom(ts(now + refundable_for))
    await booking.stub.CreateEvent(
        pb.CreateEventRequest(
            event_id=event_id,
            display_name="Test event",
            kind=kind,
            starts_at=ts(now + timedelta(days=10)),
            max_seats_per_customer=max_seats_per_customer,
            max_tickets_per_customer=max_tickets_per_customer,
            refund_policy=policy,
            sections=list(sections),
            waitlist=pb.WaitlistSettings(offer_minutes=waitlist_offer_minutes),
        )
    )
    if rows:
        await booking.stub.LoadInventory(
            pb.LoadInventoryRequest(
                event_id=event_id,
                rows=[pb.SeatRowSpec(section_id=s, row_label=r, first_seat_number=1, seat_count=n) for s, r, n in rows],
            )
        )
    reply = await booking.stub.GetEvent(pb.GetEventRequest(event_id=event_id))
    event: pb.Event = reply.event
    return event


async def seat_ids(booking: Booking, event_id: int, section_id: str) -> list[int]:
    rows = await query(
        booking,
        "SELECT seat_id FROM seats WHERE event_id = %s AND section_id = %s ORDER BY seat_id",
        (event_id, section_id),
    )
    return [int(r[0]) for r in rows]


async def query(booking: Booking, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(booking.database_url, autocommit=True) as conn:
        cur = await conn.execute(sql.encode(), params)
        return await cur.fetchall()


async def discard_event(booking: Booking, event_id: int) -> None:
    """Remove an event and everything booked in it: a control test, which
    breaks the rules on purpose, leaves no event whose counters disagree
    with its holds for another test's sweeper or audit to find (the
    PgBouncer run shares one database among all the tests)."""
    async with await psycopg.AsyncConnection.connect(booking.database_url, autocommit=True) as conn:
        async with conn.transaction():
            for table in (
                "hold_seats",
                "hold_requests",
                "holds",
                "tickets",
                "seats",
                "seat_rows",
                "section_stripes",
                "sections",
                "events",
            ):
                await conn.execute(f"DELETE FROM {table} WHERE event_id = %s".encode(), (event_id,))


async def execute(booking: Booking, sql: str) -> None:
    """Run a statement that answers no rows (DDL of a test)."""
    async with await psycopg.AsyncConnection.connect(booking.database_url, autocommit=True) as conn:
        await conn.execute(sql.encode())


async def call(coro: Any) -> tuple[Any, BoxofficeError | None]:
    """Await a gRPC call; (reply, None) or (None, the domain error)."""
    try:
        return await coro, None
    except grpc.aio.AioRpcError as err:
        return None, from_rpc_error(err)


def hold_request(
    token: str, event_id: int, seats: Sequence[int] = (), section: str = "", quantity: int = 0, request_id: str = ""
) -> pb.HoldSeatsRequest:
    if seats:
        return pb.HoldSeatsRequest(
            access_token=token, event_id=event_id, seats=pb.SeatSelection(seat_ids=list(seats)), request_id=request_id
        )
    return pb.HoldSeatsRequest(
        access_token=token,
        event_id=event_id,
        best_available=pb.BestAvailableSelection(section_id=section, quantity=quantity),
        request_id=request_id,
    )


def ttl(seconds: float) -> duration_pb2.Duration:
    out = duration_pb2.Duration()
    out.FromNanoseconds(int(seconds * 1e9))
    return out


async def snapshot(booking: Booking, event_id: int) -> dict[str, Any]:
    """Everything an event's rows say, to compare before and after a call."""
    return {
        "sections": await query(
            booking,
            "SELECT section_id, sold, held, capacity FROM section_totals WHERE event_id = %s ORDER BY 1",
            (event_id,),
        ),
        "seats": await query(
            booking,
            "SELECT seat_id, status, hold_id, hold_expires_at FROM seats WHERE event_id = %s ORDER BY 1",
            (event_id,),
        ),
        "holds": await query(
            booking, "SELECT hold_id, state, expires_at FROM holds WHERE event_id = %s ORDER BY 1", (event_id,)
        ),
        "outbox": await query(
            booking,
            "SELECT count(*) FROM outbox o JOIN holds h ON o.aggregateid = h.hold_id::text WHERE h.event_id = %s",
            (event_id,),
        ),
    }


async def audit(booking: Booking, event_id: int) -> None:
    """The database agrees with itself: every counter equals its rows, no
    seat is in two live holds, every live hold has all of its seats, and
    sold + held stays within capacity + overbook limit."""
    now = datetime.fromtimestamp(booking.clock.now(), UTC)
    sections = await query(
        booking,
        "SELECT section_id, kind, capacity, overbook_limit, sold, held FROM section_totals WHERE event_id = %s",
        (event_id,),
    )
    for section_id, kind, capacity, overbook, sold, held in sections:
        assert sold + held <= capacity + overbook, section_id
        if kind == "SEATED":
            counted = await query(
                booking,
                "SELECT count(*) FILTER (WHERE status = 'SOLD'), count(*) FILTER (WHERE status = 'HELD') "
                "FROM seats WHERE event_id = %s AND section_id = %s",
                (event_id, section_id),
            )
        else:
            counted = await query(
                booking,
                "SELECT COALESCE(sum(quantity) FILTER (WHERE state = 'CONFIRMED'), 0), "
                "COALESCE(sum(quantity) FILTER (WHERE state = 'HELD'), 0) "
                "FROM holds WHERE event_id = %s AND section_id = %s",
                (event_id, section_id),
            )
        assert (sold, held) == tuple(counted[0]), f"section {section_id}: counters {(sold, held)} rows {counted[0]}"
    # Each stripe of a seated section counts its own seats.
    stripes = await query(
        booking,
        """
        SELECT st.section_id, st.stripe, st.capacity, st.sold, st.held, COALESCE(c.seats, 0), COALESCE(c.sold, 0),
               COALESCE(c.held, 0)
          FROM section_stripes st
          JOIN sections sc ON sc.event_id = st.event_id AND sc.section_id = st.section_id AND sc.kind = 'SEATED'
          LEFT JOIN (SELECT section_id, seat_id %% booking_stripes() AS stripe, count(*) AS seats,
                            count(*) FILTER (WHERE status = 'SOLD') AS sold,
                            count(*) FILTER (WHERE status = 'HELD') AS held
                       FROM seats WHERE event_id = %s GROUP BY 1, 2) c
            ON c.section_id = st.section_id AND c.stripe = st.stripe
         WHERE st.event_id = %s
        """,
        (event_id, event_id),
    )
    for section_id, stripe, capacity, sold, held, seats, rows_sold, rows_held in stripes:
        assert (capacity, sold, held) == (seats, rows_sold, rows_held), f"stripe {section_id}/{stripe}"
    # A taken seat points at a live hold that lists it.
    orphans = await query(
        booking,
        """
        SELECT s.seat_id FROM seats s
          LEFT JOIN holds h ON h.hold_id = s.hold_id
          LEFT JOIN hold_seats hs ON hs.hold_id = s.hold_id AND hs.seat_id = s.seat_id
         WHERE s.event_id = %s AND s.status <> 'AVAILABLE'
           AND (h.hold_id IS NULL OR hs.hold_id IS NULL
                OR (s.status = 'HELD' AND h.state <> 'HELD') OR (s.status = 'SOLD' AND h.state <> 'CONFIRMED'))
        """,
        (event_id,),
    )
    assert orphans == [], f"seats taken without a live hold: {orphans}"
    # A live (unexpired HELD, or CONFIRMED) hold has every one of its seats.
    short = await query(
        booking,
        """
        SELECT h.hold_id FROM holds h
          JOIN hold_seats hs ON hs.hold_id = h.hold_id
          LEFT JOIN seats s ON s.event_id = hs.event_id AND s.seat_id = hs.seat_id AND s.hold_id = h.hold_id
         WHERE h.event_id = %s AND ((h.state = 'HELD' AND h.expires_at > %s) OR h.state = 'CONFIRMED')
         GROUP BY h.hold_id, h.quantity
        HAVING count(s.seat_id) <> h.quantity
        """,
        (event_id, now),
    )
    assert short == [], f"live holds missing seats: {short}"
