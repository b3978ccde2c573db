"""GET /v1/events through a real edge and mesh: the catalogue as a public
document (Cache-Control public, an ETag, 304), each distinct query loaded
from BookingService once per max age whatever the number of callers (and
whatever its spelling), bad parameters answered 400 naming them without a
call, forged page tokens refused, paging through the edge."""

from __future__ import annotations

import asyncio
import gc
import re
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from google.protobuf import timestamp_pb2

from boxoffice import deadline
from boxoffice.errors import DeadlineExceeded
from edge_svc.cache import PublicCache
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from tests.edge.harness import EdgeStack, edge_stack, error_of
from tests.support import Stores

START = datetime(2700, 3, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, settings={"catalogue_max_age_seconds": 300}, prefix="edge-catalogue") as stack:
        yield stack


async def loads(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics")).text
    found = re.search(r"^boxoffice_edge_catalogue_loads_total (\S+)$", text, re.M)
    assert found is not None
    return float(found.group(1))


async def make_events(stack: EdgeStack, tag: str, count: int) -> list[int]:
    booking = stack.operators["booking"].stub(bpb_grpc.BookingServiceStub)
    made = []
    for i in range(count):
        event_id = int(secrets.randbits(40)) + 10**6
        starts = START + timedelta(hours=i)
        await booking.CreateEvent(
            bpb.CreateEventRequest(
                event_id=event_id,
                display_name=f"Chuyến bay {tag} {i}",
                kind=bpb.EVENT_KIND_FLIGHT,
                starts_at=_ts(starts),
                time_zone="Asia/Ho_Chi_Minh",
                flight=bpb.Flight(flight_code="VN213", origin="SGN", destination="HAN", departs_at=_ts(starts)),
                sections=[
                    bpb.SectionSpec(
                        section_id="Y",
                        kind=bpb.SECTION_KIND_GENERAL_ADMISSION,
                        capacity=50,
                        price=bpb.Money(currency_code="VND", amount_minor=1500000),
                    )
                ],
            )
        )
        made.append(event_id)
    return made


def _ts(value: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


async def test_the_catalogue_is_public_cacheable_and_loaded_once_per_query(stack: EdgeStack) -> None:
    tag = secrets.token_hex(4)
    made = await make_events(stack, tag, 3)
    query = f"q=chuyen+bay+{tag}&startsAfter=2700-01-01T00:00:00Z"
    async with stack.client() as client:
        before = await loads(client)
        replies = await asyncio.gather(*(client.get(f"/v1/events?{query}") for _ in range(50)))
        assert {r.status_code for r in replies} == {200}
        assert await loads(client) == before + 1
        reply = replies[0]
        assert reply.headers["cache-control"].startswith("public, max-age=300")
        body = reply.json()
        assert [int(e["eventId"]) for e in body["events"]] == made
        assert body["nextPageToken"] == ""
        first = body["events"][0]
        assert first["timeZone"] == "Asia/Ho_Chi_Minh" and first["flight"]["origin"] == "SGN"
        assert first["availability"] == "EVENT_AVAILABILITY_ON_SALE"
        assert first["lowestPrice"] == {"currencyCode": "VND", "amountMinor": "1500000"}
        again = await client.get(f"/v1/events?{query}", headers={"If-None-Match": reply.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        # Another order, the message's own parameter names and the defaults
        # written out share the one load; other accents are another query
        # (the edge does not fold them), with the same answer.
        for spelling in (
            f"startsAfter=2700-01-01T00:00:00Z&q=CHUYỂN%20%20bay+{tag}",
            f"query=chuyen+bay+{tag}&startsAfter=2700-01-01T00:00:00%2B00:00&pageSize=20",
        ):
            same = await client.get(f"/v1/events?{spelling}")
            assert same.status_code == 200 and same.headers["etag"] == reply.headers["etag"], spelling
        assert await loads(client) == before + 2
        other = await client.get(f"/v1/events?{query}&kind=flight&origin=sgn&destination=HAN&date=2700-03-01")
        assert [int(e["eventId"]) for e in other.json()["events"]] == made
        assert await loads(client) == before + 3


async def test_paging_through_the_edge_and_forged_tokens(stack: EdgeStack) -> None:
    tag = secrets.token_hex(4)
    made = await make_events(stack, tag, 5)
    query = f"q={tag}&startsAfter=2700-01-01T00:00:00Z&pageSize=2"
    seen: list[int] = []
    token = ""
    async with stack.client() as client:
        while True:
            reply = await client.get(f"/v1/events?{query}" + (f"&pageToken={token}" if token else ""))
            assert reply.status_code == 200, reply.text
            seen += [int(e["eventId"]) for e in reply.json()["events"]]
            token = reply.json()["nextPageToken"]
            if not token:
                break
        assert seen == made
        first = (await client.get(f"/v1/events?{query}")).json()["nextPageToken"]
        for bad, q in ((first[:-3] + "xyz", query), (first, f"q={tag}x&pageSize=2&startsAfter=2700-01-01T00:00:00Z")):
            reply = await client.get(f"/v1/events?{q}&pageToken={bad}")
            assert error_of(reply) == (400, "INVALID_ARGUMENT", "PAGE_TOKEN_INVALID")
            assert reply.json()["error"]["details"][0]["metadata"] == {"field": "pageToken"}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("pageSize=0", "pageSize"),
        ("pageSize=101", "pageSize"),
        ("pageSize=ten", "pageSize"),
        ("kind=opera", "kind"),
        ("origin=SG", "origin"),
        ("destination=H4N", "destination"),
        ("date=2026-02-30", "date"),
        ("date=20261220", "date"),
        ("startsAfter=2026-12-20", "startsAfter"),
        ("startsBefore=2026-12-20T08:00:00", "startsBefore"),
        ("startsAfter=9999-12-31T23:59:59-23:59", "startsAfter"),
        ("startsBefore=0001-01-01T00:00:00%2B23:59", "startsBefore"),
        ("startsAfter=2026-12-20T10:00:00%2B25:00", "startsAfter"),
        ("startsAfter=2026-12-21T00:00:00Z&startsBefore=2026-12-20T00:00:00Z", "startsBefore"),
        ("q=" + "x" * 201, "q"),
        ("q=a&q=b", "q"),
        ("q=a&query=b", "query"),
        ("sort=name", "sort"),
    ],
)
async def test_a_bad_parameter_is_400_naming_it_without_a_call(stack: EdgeStack, query: str, field: str) -> None:
    async with stack.client() as client:
        before = await loads(client)
        reply = await client.get(f"/v1/events?{query}")
        assert error_of(reply) == (400, "INVALID_ARGUMENT", "INVALID_FIELD"), reply.text
        assert reply.json()["error"]["details"][0]["metadata"]["field"] == field
        assert await loads(client) == before


async def test_a_load_that_fails_after_its_callers_gave_up_is_not_left_unretrieved() -> None:
    """A catalogue load whose every caller ran out of deadline, and that then
    fails, is taken care of by the cache (nothing logs an error that nobody
    retrieved); the next caller loads again."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    release = asyncio.Event()
    calls = 0

    async def load() -> bytes:
        nonlocal calls
        calls += 1
        if calls == 1:
            await release.wait()
            raise RuntimeError("the backend failed late")
        return b"{}"

    cache = PublicCache(max_age_seconds=60, load_timeout_seconds=5.0)
    with deadline.scope(0.05), pytest.raises(DeadlineExceeded):
        await cache.document("k", load)
    release.set()
    for _ in range(5):
        await asyncio.sleep(0)
    gc.collect()
    assert await cache.document("k", load) == b"{}" and calls == 2
    loop.set_exception_handler(None)
    assert reported == []


async def test_an_unpublished_event_is_not_found_by_fans(stack: EdgeStack) -> None:
    booking = stack.operators["booking"].stub(bpb_grpc.BookingServiceStub)
    hidden, shown = (int(secrets.randbits(40)) + 10**6 for _ in range(2))
    for event_id, published in ((hidden, False), (shown, True)):
        await booking.CreateEvent(
            bpb.CreateEventRequest(
                event_id=event_id,
                display_name="Rehearsal",
                kind=bpb.EVENT_KIND_CONCERT,
                starts_at=_ts(START),
                published=published,
                sections=[
                    bpb.SectionSpec(
                        section_id="FLOOR",
                        kind=bpb.SECTION_KIND_GENERAL_ADMISSION,
                        capacity=10,
                        price=bpb.Money(currency_code="EUR", amount_minor=1000),
                    )
                ],
            )
        )
    async with stack.client() as client:
        for path in (f"/v1/events/{hidden}", f"/v1/events/{hidden}/seatmap"):
            reply = await client.get(path)
            assert reply.status_code == 404, (path, reply.text)
            assert error_of(reply) == (404, "NOT_FOUND", "NOT_FOUND"), (path, reply.text)
        # The control: the same event published is there, and its seat map too.
        assert (await client.get(f"/v1/events/{shown}")).status_code == 200
        assert (await client.get(f"/v1/events/{shown}/seatmap")).status_code == 200
    # Operators still see it (BookingService answers them as before).
    assert (await booking.GetEvent(bpb.GetEventRequest(event_id=hidden))).event.published is False
