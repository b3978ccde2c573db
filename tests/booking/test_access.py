"""Who may hold and what: no token, a forged one, another event's, another
customer's hold; malformed requests. Each is refused and changes nothing."""

from __future__ import annotations

import grpc

from boxoffice.errors import InvalidArgument, NotFound, PermissionDenied, Unauthenticated
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from tests.booking.harness import booking_server, call, create_event, hold_request, seat_ids, seated, snapshot, ttl
from tests.support import Stores


async def test_tokens_are_checked_and_refusals_change_nothing(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 4)])
        other = await create_event(booking, [seated("A")], [("A", "A", 4)])
        seats = await seat_ids(booking, event.event_id, "A")
        held = (
            await booking.stub.HoldSeats(
                hold_request(booking.token("owner", event.event_id), event.event_id, seats[:1])
            )
        ).hold
        before = await snapshot(booking, event.event_id)
        good = booking.token("mallory", event.event_id)
        head, _, signature = good.rpartition(".")
        forged = f"{head}.{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"
        cases = [
            ("", Unauthenticated, "TOKEN_MISSING"),
            ("not-a-token", Unauthenticated, "TOKEN_INVALID"),
            (forged, Unauthenticated, "TOKEN_INVALID"),
            (booking.token("mallory", other.event_id), PermissionDenied, "TOKEN_WRONG_EVENT"),
        ]
        for token, kind, reason in cases:
            _, err = await call(booking.stub.HoldSeats(hold_request(token, event.event_id, seats[1:2])))
            assert isinstance(err, kind) and err.reason == reason, (token, err)
            _, err = await call(
                booking.stub.ReleaseHold(pb.ReleaseHoldRequest(access_token=token, hold_id=held.hold_id))
            )
            assert isinstance(err, kind), (token, err)
            _, err = await call(booking.stub.GetHold(pb.GetHoldRequest(access_token=token, hold_id=held.hold_id)))
            assert isinstance(err, kind), (token, err)
        # A genuine token of another customer: not their hold.
        for method, request in (
            (booking.stub.GetHold, pb.GetHoldRequest(access_token=good, hold_id=held.hold_id)),
            (booking.stub.ReleaseHold, pb.ReleaseHoldRequest(access_token=good, hold_id=held.hold_id)),
        ):
            _, err = await call(method(request))
            assert isinstance(err, PermissionDenied) and err.reason == "NOT_HOLD_OWNER"
        _, err = await call(
            booking.stub.ExtendHold(
                pb.ExtendHoldRequest(hold_id=held.hold_id, customer_id="mallory", extend_by=ttl(60))
            )
        )
        assert isinstance(err, PermissionDenied)
        assert await snapshot(booking, event.event_id) == before
        # The customer comes from the token: a hold made with mallory's token is mallory's.
        mine = (await booking.stub.HoldSeats(hold_request(good, event.event_id, seats[1:2]))).hold
        assert mine.customer_id == "mallory"


async def test_malformed_holds_are_invalid_argument_and_change_nothing(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A"), seated("B")], [("A", "A", 6), ("B", "A", 2)])
        seats = await seat_ids(booking, event.event_id, "A")
        b_seats = await seat_ids(booking, event.event_id, "B")
        token = booking.token("c", event.event_id)
        before = await snapshot(booking, event.event_id)
        bad = [
            hold_request(token, event.event_id, [0]),
            hold_request(token, event.event_id, [-5]),
            hold_request(token, event.event_id, seats[:5]),
            hold_request(token, event.event_id, [seats[0], seats[0]]),
            hold_request(token, event.event_id, [seats[0], 10**12]),
            hold_request(token, event.event_id, [seats[0], b_seats[0]]),
            hold_request(token, event.event_id, section="nope", quantity=1),
            hold_request(token, event.event_id, section="bad id!", quantity=1),
            hold_request(token, event.event_id, section="A", quantity=0),
            hold_request(token, event.event_id, section="A", quantity=5),
            pb.HoldSeatsRequest(access_token=token, event_id=event.event_id),
            hold_request(token, event.event_id, seats[:1], request_id="x" * 65),
        ]
        for request in bad:
            _, err = await call(booking.stub.HoldSeats(request))
            assert isinstance(err, InvalidArgument), (request, err)
            assert err.metadata.get("field"), err
        _, err = await call(booking.stub.HoldSeats(hold_request(token, 0, seats[:1])))
        assert isinstance(err, InvalidArgument)
        for hold_id in ("", "not-a-uuid"):
            _, err = await call(booking.stub.GetHold(pb.GetHoldRequest(access_token=token, hold_id=hold_id)))
            assert isinstance(err, InvalidArgument)
        _, err = await call(
            booking.stub.GetHold(pb.GetHoldRequest(access_token=token, hold_id="6f1c0c1e-0000-4000-8000-000000000000"))
        )
        assert isinstance(err, NotFound)
        _, err = await call(booking.stub.HoldSeats(hold_request(booking.token("c", 42), 42, [1])))
        assert err is not None and err.code == grpc.StatusCode.NOT_FOUND
        assert await snapshot(booking, event.event_id) == before
