"""A waiting-list offer's e-mail on the real path: BookingService (real
Postgres, gRPC as the edge calls it) sells out an event, a fan joins its
waiting list, a booking is cancelled and booking's offer pass offers the
seat to the fan; the mailer's offer sweep, against a real relay, writes to
the fan once, with the very hold, price and expiry the fan's entry shows;
once the fan has bought it nothing more is sent, and the booking's own
deliveries are the tickets', not the offer's."""

from __future__ import annotations

import secrets
import uuid
from datetime import UTC
from email.message import EmailMessage

from booking_svc.waitlist import WaitlistOfferer
from boxoffice import db
from boxoffice.caller import EMAIL_METADATA_KEY, LANGUAGE_METADATA_KEY
from boxoffice.money import format_money
from boxoffice.runtime import Pool
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from mail_svc.adapters.deliveries import PgDeliveryStore
from tests.booking.harness import Booking, booking_server, create_event, hold_request, seated
from tests.edge.asserting import as_fan
from tests.mail.harness import mailer_of
from tests.mail.relay import RelayState
from tests.support import Stores

# The offer pass runs when the test says so.
_QUIET = {"BOXOFFICE_BOOKING_WAITLIST_INTERVAL_SECONDS": "60"}


async def _buy(booking: Booking, event_id: int, fan: str) -> pb.Hold:
    token = booking.token(fan, event_id)
    hold: pb.Hold = (await booking.stub.HoldSeats(hold_request(token, event_id, section="A", quantity=1))).hold
    await _pay(booking, hold)
    return hold


async def _pay(booking: Booking, hold: pb.Hold) -> None:
    await booking.stub.ConfirmHold(
        pb.ConfirmHoldRequest(
            hold_id=hold.hold_id,
            idempotency_key=f"c-{hold.hold_id}",
            payment_id=f"p-{hold.hold_id}",
            amount_paid=hold.amount,
        )
    )


async def _entry(booking: Booking, event_id: int, fan: str) -> pb.WaitlistEntry:
    reply = await booking.stub.GetWaitlistEntry(pb.GetWaitlistEntryRequest(event_id=event_id), metadata=as_fan(fan))
    entry: pb.WaitlistEntry = reply.entry
    return entry


async def _fan_paid_before(pool: Pool, event_id: int, fan: str, email: str, language: str) -> None:
    """The fan's earlier payment (of another booking), which named their
    verified address as the edge asserted it."""
    hold_id = str(uuid.uuid4())
    async with db.transaction(pool) as conn:
        await conn.execute(
            """
            INSERT INTO payments (payment_id, hold_id, attempt, event_id, customer_id, amount_minor, currency,
                                  payment_method, state, provider_idempotency_key, notify_email, notify_language)
            VALUES (%s, %s, 1, %s, %s, 5000, 'EUR', 'pm_card_ok', 'SUCCEEDED', %s, %s, %s)
            """,
            (str(uuid.uuid4()), hold_id, event_id, fan, f"mail-test-{hold_id}", email, language),
        )


async def test_a_seat_offered_down_the_list_is_written_to_its_fan_once(
    stores: Stores, pool: Pool, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    settings = {**environ, "BOXOFFICE_MAIL_TICKETS_URL": "https://tickets.example/e/{event_id}"}
    async with booking_server(stores, environ=_QUIET) as booking:
        event = await create_event(booking, [seated("A", price=6500)], [("A", "1", 1)], max_seats_per_customer=2)
        event_id = event.event_id
        sold = await _buy(booking, event_id, "buyer")
        fan = f"wl-{secrets.token_hex(5)}"
        email = f"{fan}@example.test"
        await _fan_paid_before(pool, event_id, fan, email, "vi")
        await booking.stub.JoinWaitlist(
            pb.JoinWaitlistRequest(event_id=event_id, section_id="A", quantity=1), metadata=as_fan(fan)
        )
        # No offer yet: nothing to write.
        async with mailer_of(stores, settings) as role:
            await role.offers.run_once()
        assert not [m for m in state.messages() if m["To"] == email]

        await booking.operator.CancelBooking(
            pb.CancelBookingRequest(hold_id=sold.hold_id, customer_id="buyer", reason="test")
        )
        offerer = WaitlistOfferer(booking.store, booking.clock, booking.metrics, interval_seconds=60)
        # (The pass also settles what other tests of this database left.)
        [done] = [p for p in await offerer.pass_once() if p.event_id == event_id]
        assert [o.customer_id for o in done.offers] == [fan]
        entry = await _entry(booking, event_id, fan)
        assert entry.state == pb.WAITLIST_STATE_OFFERED
        offer = entry.offer

        async with mailer_of(stores, settings) as role:
            assert await role.offers.run_once() >= 1
            assert await role.offers.run_once() == 0
        (message,) = [m for m in state.messages() if m["To"] == email]
        assert message["Content-Language"] == "vi"
        text = message.get_body(preferencelist=("plain",))
        assert isinstance(text, EmailMessage)
        body = str(text.get_content())
        # The very offer the fan's entry shows: its seat, price and end (UTC is the event's zone).
        until = offer.expires_at.ToDatetime(tzinfo=UTC)
        assert len(offer.seats) == 1
        assert f"Số hiệu ghế: {', '.join(s.label for s in offer.seats)}" in body
        assert f"Giá: {format_money(offer.amount.amount_minor, offer.amount.currency_code)}" in body
        assert f"Giữ cho bạn đến: {until:%Y-%m-%d %H:%M}" in body
        assert f"https://tickets.example/e/{event_id}" in body

        # The fan buys it: the offer pass settles it TAKEN; nothing more goes out.
        await _pay(booking, offer)
        await offerer.pass_once()
        assert (await _entry(booking, event_id, fan)).state == pb.WAITLIST_STATE_TAKEN
        async with mailer_of(stores, settings) as role:
            await role.offers.run_once()
            await role.sweep.run_once()
        assert len([m for m in state.messages() if m["To"] == email]) == 1
        # The booking bought from the offer shows its own messages only.
        assert await PgDeliveryStore(pool).deliveries(offer.hold_id) == []


async def test_an_offer_goes_to_the_address_the_fan_joined_with(
    stores: Stores, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    """A fan who never paid before: the address and language the edge
    asserted when they joined the list are where their offer goes."""
    _, state = relay
    async with booking_server(stores, environ=_QUIET) as booking:
        event = await create_event(booking, [seated("A")], [("A", "1", 1)], max_seats_per_customer=2)
        event_id = event.event_id
        sold = await _buy(booking, event_id, "buyer")
        fan = f"wl-{secrets.token_hex(5)}"
        email = f"{fan}@example.test"
        await booking.stub.JoinWaitlist(
            pb.JoinWaitlistRequest(event_id=event_id, section_id="A", quantity=1),
            metadata=(*as_fan(fan), (EMAIL_METADATA_KEY, email), (LANGUAGE_METADATA_KEY, "pt-BR")),
        )
        await booking.operator.CancelBooking(
            pb.CancelBookingRequest(hold_id=sold.hold_id, customer_id="buyer", reason="test")
        )
        offerer = WaitlistOfferer(booking.store, booking.clock, booking.metrics, interval_seconds=60)
        [done] = [p for p in await offerer.pass_once() if p.event_id == event_id]
        assert [o.customer_id for o in done.offers] == [fan]
        async with mailer_of(stores, environ) as role:
            assert await role.offers.run_once() >= 1
        (message,) = [m for m in state.messages() if m["To"] == email]
        assert message["Content-Language"] == "pt-BR"
