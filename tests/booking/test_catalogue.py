"""ListEvents, the catalogue, against a real server and Postgres: filters
alone and combined, local dates in each event's own zone, accent- and
case-insensitive words in the three languages' data, paging with inserts
between pages, unpublished events never listed, availability from live
counters, forged and reused page tokens, bad filters naming their field.

Each test works in its own window of far-future start times (and its own
words), so that the events other tests create never show up in its pages."""

from __future__ import annotations

import asyncio
import random
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from boxoffice.errors import InvalidArgument
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from tests.booking.harness import (
    Booking,
    booking_server,
    call,
    general,
    hold_request,
    new_event_id,
    seat_ids,
    seated,
    ts,
)
from tests.support import Stores

HCM = "Asia/Ho_Chi_Minh"  # UTC+7
SAO_PAULO = "America/Sao_Paulo"  # UTC-3


def window() -> datetime:
    """The midnight UTC that starts a test's own year of start times."""
    return datetime(random.randint(2200, 2900), 1, 1, tzinfo=UTC)


def between(start: datetime, days: int = 366) -> dict[str, Any]:
    return {"starts_after": ts(start), "starts_before": ts(start + timedelta(days=days))}


async def make(
    booking: Booking,
    name: str,
    starts_at: datetime,
    *,
    kind: pb.EventKind.ValueType = pb.EVENT_KIND_CONCERT,
    sections: list[pb.SectionSpec] | None = None,
    **fields: Any,
) -> int:
    event_id = new_event_id()
    await booking.operator.CreateEvent(
        pb.CreateEventRequest(
            event_id=event_id,
            display_name=name,
            kind=kind,
            starts_at=ts(starts_at),
            sections=sections or [general("G", 100)],
            **fields,
        )
    )
    return event_id


def flight(code: str, origin: str, destination: str, departs: datetime) -> pb.Flight:
    return pb.Flight(
        flight_code=code,
        origin=origin,
        destination=destination,
        departs_at=ts(departs),
        arrives_at=ts(departs + timedelta(hours=2)),
    )


async def ids(booking: Booking, **request: Any) -> list[int]:
    found = await booking.stub.ListEvents(pb.ListEventsRequest(page_size=100, **request))
    return [e.event_id for e in found.events]


async def test_filters_alone_and_combined_and_local_dates(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        start = window()
        tag = secrets.token_hex(4)
        day = start + timedelta(days=20)  # the 21st of January
        # 00:30 in Ho Chi Minh City on the 21st is 17:30 UTC on the 20th.
        early = day - timedelta(hours=7) + timedelta(minutes=30)
        sgn_han = await make(
            booking,
            f"Hanoi morning {tag}",
            early,
            kind=pb.EVENT_KIND_FLIGHT,
            time_zone=HCM,
            flight=flight("VN213", "SGN", "HAN", early),
        )
        han_sgn = await make(
            booking,
            f"Saigon evening {tag}",
            day + timedelta(hours=12),
            kind=pb.EVENT_KIND_FLIGHT,
            time_zone=HCM,
            flight=flight("VN214", "HAN", "SGN", day + timedelta(hours=12)),
        )
        my_dinh = await make(
            booking,
            f"Mùa hè rực rỡ {tag}",
            day + timedelta(hours=13),  # 20:00 in Hanoi
            time_zone=HCM,
            description="New Year's Eve live",
            venue=pb.Venue(display_name="Sân vận động Mỹ Đình", city="Hà Nội", country_code="VN"),
        )
        # 23:00 in São Paulo on the 20th is 02:00 UTC on the 21st.
        sao_paulo = await make(
            booking,
            f"Noite de Ação {tag}",
            day + timedelta(hours=2),
            time_zone=SAO_PAULO,
            venue=pb.Venue(display_name="Estádio do Morumbi", city="São Paulo", country_code="BR"),
        )
        hidden = await make(booking, f"Mùa hè secret {tag}", day + timedelta(hours=14), published=False)
        everything = between(start)

        assert await ids(booking, **everything) == [sgn_han, sao_paulo, han_sgn, my_dinh]
        assert await ids(booking, kind=pb.EVENT_KIND_FLIGHT, **everything) == [sgn_han, han_sgn]
        assert await ids(booking, kind=pb.EVENT_KIND_CONCERT, **everything) == [sao_paulo, my_dinh]
        assert await ids(booking, origin="SGN", **everything) == [sgn_han]
        assert await ids(booking, destination="SGN", **everything) == [han_sgn]
        assert await ids(booking, origin="SGN", destination="HAN", **everything) == [sgn_han]
        assert await ids(booking, origin="SGN", destination="SGN", **everything) == []
        # Local dates, each in the event's own zone.
        assert await ids(booking, local_date=day.date().isoformat(), **everything) == [sgn_han, han_sgn, my_dinh]
        before = (day - timedelta(days=1)).date().isoformat()
        assert await ids(booking, local_date=before, **everything) == [sao_paulo]
        assert await ids(booking, local_date=before, origin="SGN", **everything) == []
        # Words: accents and case ignored, in Vietnamese, Portuguese and English data.
        for words, expected in (
            (f"my dinh {tag}", [my_dinh]),
            (f"MỸ ĐÌNH {tag}", [my_dinh]),
            (f"ha noi {tag}", [my_dinh]),
            (f"mua he {tag}", [my_dinh]),
            (f"acao {tag}", [sao_paulo]),
            (f"SÃO PAULO {tag}", [sao_paulo]),
            (f"vn213 {tag}", [sgn_han]),
            (f"han {tag}", [sgn_han, han_sgn]),
            (f"hanoi morning {tag}", [sgn_han]),
            (f"morumbi dinh {tag}", []),
        ):
            assert await ids(booking, query=words, **everything) == expected, words
        assert await ids(booking, query=f"han {tag}", kind=pb.EVENT_KIND_FLIGHT, origin="HAN", **everything) == [
            han_sgn
        ]
        # The unpublished event is never listed, whatever the filter.
        assert hidden not in await ids(booking, query=f"secret {tag}", **everything)
        assert hidden not in await ids(booking, query=f"mua he {tag}", **everything)
        # A start range narrows; by default, only what has not started.
        assert await ids(booking, starts_after=ts(day), starts_before=ts(day + timedelta(hours=12, seconds=1))) == [
            sao_paulo,
            han_sgn,
        ]
        listed = (await booking.stub.ListEvents(pb.ListEventsRequest(query=f"my dinh {tag}", **everything))).events[0]
        assert (listed.time_zone, listed.venue.display_name, listed.venue.city) == (
            HCM,
            "Sân vận động Mỹ Đình",
            "Hà Nội",
        )
        assert listed.description == "New Year's Eve live"
        assert (listed.lowest_price.currency_code, listed.lowest_price.amount_minor) == ("EUR", 3000)
        route = (await booking.stub.ListEvents(pb.ListEventsRequest(origin="SGN", **everything))).events[0]
        assert (route.flight.flight_code, route.flight.origin, route.flight.destination) == ("VN213", "SGN", "HAN")
        got = (await booking.stub.GetEvent(pb.GetEventRequest(event_id=hidden))).event
        assert not got.published and got.time_zone == "UTC"


async def test_paging_through_250_events_with_inserts_between_pages(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        start = window()
        tag = secrets.token_hex(4)

        async def add(minutes: list[int]) -> list[int]:
            made: list[int] = []
            for chunk in range(0, len(minutes), 25):
                made += await asyncio.gather(
                    *(make(booking, f"Show {tag}", start + timedelta(minutes=m)) for m in minutes[chunk : chunk + 25])
                )
            return made

        # Pairs of events at the same minute: the event id breaks the tie.
        first = await add([10 * (i // 2) + 10 for i in range(250)])
        seen: list[int] = []
        inserted_after: list[int] = []
        token = ""
        pages = 0
        while True:
            page = await booking.stub.ListEvents(
                pb.ListEventsRequest(page_size=23, page_token=token, query=tag, **between(start))
            )
            seen += [e.event_id for e in page.events]
            pages += 1
            if not page.next_page_token:
                break
            token = page.next_page_token
            # One event before the cursor (never seen) and one far after it (seen).
            last = page.events[-1].starts_at.ToDatetime(tzinfo=UTC)
            await add([int((last - start).total_seconds() // 60) - 1])
            inserted_after += await add([100_000 + pages])
        assert len(seen) == len(set(seen)), "an event listed twice"
        assert set(first) <= set(seen) and set(inserted_after) <= set(seen)
        assert len(seen) == 250 + len(inserted_after)
        assert pages == -(-len(seen) // 23)


async def test_availability_follows_the_counters(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        start = window()
        tag = secrets.token_hex(4)
        event_id = await make(
            booking, f"Last seat {tag}", start + timedelta(days=1), sections=[seated("A", price=900), general("B", 40)]
        )
        later = await make(
            booking,
            f"Not yet {tag}",
            start + timedelta(days=2),
            sale_opens_at=ts(datetime.now(UTC) + timedelta(days=30)),
        )
        empty = await make(booking, f"No seats {tag}", start + timedelta(days=3), sections=[seated("A")])
        await booking.operator.LoadInventory(
            pb.LoadInventoryRequest(
                event_id=event_id,
                rows=[pb.SeatRowSpec(section_id="A", row_label="1", first_seat_number=1, seat_count=1)],
            )
        )

        async def state() -> dict[int, tuple[int, int]]:
            page = await booking.stub.ListEvents(pb.ListEventsRequest(query=tag, **between(start)))
            return {e.event_id: (e.availability, e.lowest_price.amount_minor) for e in page.events}

        assert await state() == {
            event_id: (pb.EVENT_AVAILABILITY_ON_SALE, 900),
            later: (pb.EVENT_AVAILABILITY_NOT_YET_ON_SALE, 3000),
            empty: (pb.EVENT_AVAILABILITY_NOT_YET_ON_SALE, 5000),
        }
        token = booking.token("fan", event_id)
        for _ in range(8):  # 41 places: 32 held leave 9, FEW_LEFT
            await booking.stub.HoldSeats(hold_request(token, event_id, section="B", quantity=4))
            token = booking.token(secrets.token_hex(4), event_id)
        assert (await state())[event_id] == (pb.EVENT_AVAILABILITY_FEW_LEFT, 900)
        for quantity in (4, 4):
            await booking.stub.HoldSeats(hold_request(token, event_id, section="B", quantity=quantity))
            token = booking.token(secrets.token_hex(4), event_id)
        # The last seat of A is the only one left: its price is the lowest open.
        assert (await state())[event_id] == (pb.EVENT_AVAILABILITY_FEW_LEFT, 900)
        (seat,) = await seat_ids(booking, event_id, "A")
        hold = (await booking.stub.HoldSeats(hold_request(token, event_id, [seat]))).hold
        await booking.stub.ConfirmHold(
            pb.ConfirmHoldRequest(
                hold_id=hold.hold_id, idempotency_key=f"c-{hold.hold_id}", payment_id="p-1", amount_paid=hold.amount
            )
        )
        assert (await state())[event_id] == (pb.EVENT_AVAILABILITY_SOLD_OUT, 900)


async def test_bad_filters_and_page_tokens_are_refused(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        start = window()
        tag = secrets.token_hex(4)
        for i in range(3):
            await make(booking, f"Tokens {tag}", start + timedelta(hours=i))
        first = await booking.stub.ListEvents(pb.ListEventsRequest(page_size=1, query=tag, **between(start)))
        token = first.next_page_token
        assert token
        second = await booking.stub.ListEvents(
            pb.ListEventsRequest(page_size=1, page_token=token, query=tag, **between(start))
        )
        assert second.events[0].event_id != first.events[0].event_id
        forged = [token[:-2] + ("AA" if token[-2:] != "AA" else "BB"), "x", token + "x", "events.a.b.c"]
        head, kid, payload, signature = token.split(".")
        forged.append(".".join((head, kid, payload[::-1], signature)))
        for bad in forged:
            _, err = await call(
                booking.stub.ListEvents(pb.ListEventsRequest(page_size=1, page_token=bad, query=tag, **between(start)))
            )
            assert isinstance(err, InvalidArgument) and err.reason == "PAGE_TOKEN_INVALID", bad
        for other in ({"query": tag + " x"}, {"kind": pb.EVENT_KIND_CONCERT}, {"page_size": 1}):
            request: dict[str, Any] = {"page_size": 1, "query": tag, **between(start), **other}
            if "page_size" in other:
                request["starts_before"] = ts(start + timedelta(days=2))
            _, err = await call(booking.stub.ListEvents(pb.ListEventsRequest(page_token=token, **request)))
            assert isinstance(err, InvalidArgument) and err.reason == "PAGE_TOKEN_INVALID", other
        for field, request in (
            ("page_size", {"page_size": 101}),
            ("page_size", {"page_size": -1}),
            ("origin", {"origin": "SG"}),
            ("origin", {"origin": "sgn"}),
            ("destination", {"destination": "HAN1"}),
            ("local_date", {"local_date": "2026-13-01"}),
            ("local_date", {"local_date": "20261201"}),
            ("query", {"query": "x" * 201}),
            ("kind", {"kind": 7}),
            ("starts_before", {"starts_after": ts(start), "starts_before": ts(start)}),
        ):
            _, err = await call(booking.stub.ListEvents(pb.ListEventsRequest(**request)))
            assert isinstance(err, InvalidArgument) and err.metadata.get("field") == field, (request, err)


async def test_an_events_catalogue_fields_are_checked_and_stored(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        start = window()
        departs = start + timedelta(days=1)
        good = flight("VN213", "SGN", "HAN", departs)
        cases: list[tuple[str, dict[str, Any], pb.EventKind.ValueType]] = [
            ("time_zone", {"time_zone": "Asia/Nowhere"}, pb.EVENT_KIND_CONCERT),
            ("time_zone", {"time_zone": "../etc/passwd"}, pb.EVENT_KIND_CONCERT),
            (
                "venue.country_code",
                {"venue": pb.Venue(display_name="V", city="C", country_code="VNM")},
                pb.EVENT_KIND_CONCERT,
            ),
            ("venue.city", {"venue": pb.Venue(display_name="V", country_code="VN")}, pb.EVENT_KIND_CONCERT),
            ("venue", {"venue": pb.Venue(display_name="V", city="C", country_code="VN")}, pb.EVENT_KIND_FLIGHT),
            ("flight", {"flight": good}, pb.EVENT_KIND_CONCERT),
            ("flight.origin", {"flight": flight("VN213", "SG1", "HAN", departs)}, pb.EVENT_KIND_FLIGHT),
            ("flight.destination", {"flight": flight("VN213", "SGN", "SGN", departs)}, pb.EVENT_KIND_FLIGHT),
            ("flight.flight_code", {"flight": flight("V", "SGN", "HAN", departs)}, pb.EVENT_KIND_FLIGHT),
            (
                "flight.departs_at",
                {"flight": pb.Flight(flight_code="VN1", origin="SGN", destination="HAN")},
                pb.EVENT_KIND_FLIGHT,
            ),
            (
                "flight.departs_at",
                {"flight": flight("VN1", "SGN", "HAN", departs + timedelta(hours=1))},
                pb.EVENT_KIND_FLIGHT,
            ),
            ("description", {"description": "x" * 2001}, pb.EVENT_KIND_CONCERT),
        ]
        for field, fields, kind in cases:
            event_id = new_event_id()
            _, err = await call(
                booking.operator.CreateEvent(
                    pb.CreateEventRequest(
                        event_id=event_id,
                        display_name="Bad",
                        kind=kind,
                        starts_at=ts(departs),
                        sections=[general("G", 5)],
                        **fields,
                    )
                )
            )
            assert isinstance(err, InvalidArgument) and err.metadata.get("field") == field, (field, err)
            _, missing = await call(booking.stub.GetEvent(pb.GetEventRequest(event_id=event_id)))
            assert missing is not None
        made = await make(
            booking, "VN213", departs, kind=pb.EVENT_KIND_FLIGHT, time_zone=HCM, flight=good, published=False
        )
        event = (await booking.stub.GetEvent(pb.GetEventRequest(event_id=made))).event
        assert (event.time_zone, event.published, event.flight.origin, event.flight.destination) == (
            HCM,
            False,
            "SGN",
            "HAN",
        )
        assert event.flight.arrives_at.ToDatetime(tzinfo=UTC) == departs + timedelta(hours=2)
