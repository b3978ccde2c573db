"""The mailer against a real relay (aiosmtpd with STARTTLS and AUTH), real
Postgres and a real Redis stream: one message per booking and kind, in the
fan's language, with each ticket's code and a QR image that reads back as
it; exactly once through crashes and "try later"; refusals recorded."""

from __future__ import annotations

from email.message import EmailMessage

import pytest
import redis.asyncio as aioredis
import zxingcpp

from boxoffice.runtime import Pool
from mail_svc.jobs.mailer import MailHooks
from mail_svc.model import Delivery, DeliveryState, Kind
from tests.mail.harness import Booking, mailer_of, make_booking, publish
from tests.mail.pngread import grey_pixels
from tests.mail.relay import RelayState
from tests.support import Stores


def _qr_codes(message: EmailMessage) -> list[str]:
    decoded: list[str] = []
    for part in message.walk():
        if part.get_content_type() == "image/png":
            assert isinstance(part, EmailMessage)
            width, height, pixels = grey_pixels(part.get_content())
            found = zxingcpp.read_barcodes(memoryview(pixels).cast("B", (height, width)))
            decoded.extend(result.text for result in found)
    return decoded


async def _delivery(pool: Pool, booking: Booking, kind: Kind) -> tuple[str, int, str]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT state, attempts, message_id FROM mail_deliveries WHERE hold_id = %s AND kind = %s",
            (booking.hold_id, kind.value),
        )
        row = await cur.fetchone()
    assert row is not None
    return row[0], row[1], row[2]


@pytest.mark.parametrize(
    ("language", "greeting"),
    [("en", "Your tickets are ready."), ("vi", "Vé của bạn đã sẵn sàng."), ("pt-BR", "Seus ingressos estão prontos.")],
)
async def test_two_seats_make_one_message_with_both_codes_and_readable_qr_images(
    stores: Stores,
    pool: Pool,
    redis: aioredis.Redis,
    relay: tuple[int, RelayState],
    environ: dict[str, str],
    language: str,
    greeting: str,
) -> None:
    _, state = relay
    booking = await make_booking(pool, seats=2, language=language)
    async with mailer_of(stores, environ) as role:
        await publish(redis, role.config.stream, booking)
        assert await role.consumer.read_once(block_ms=100) == 1
        # Redelivered (a relay's repair): nothing more is sent.
        await publish(redis, role.config.stream, booking)
        await role.consumer.read_once(block_ms=100)
    messages = state.messages()
    assert len(messages) == 1
    message = messages[0]
    assert state.logins >= 1 and state.tls_sessions == 1
    assert message["To"] == "fan@example.test"
    assert message["Content-Language"] == language
    assert message["Message-ID"] == (await _delivery(pool, booking, Kind.TICKETS))[2]
    assert message.is_multipart() and message.get_content_type() == "multipart/alternative"
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert isinstance(text, EmailMessage) and isinstance(html, EmailMessage)
    html_text = html.get_content()
    assert f'<html lang="{language}">' in html_text
    assert greeting in text.get_content() and greeting in html_text
    for code in booking.codes:
        assert code in text.get_content() and code in html_text
    # The event's name is escaped in the HTML, said as it is in the text.
    assert "Sơn Tùng M-TP &lt;Live&gt;" in html_text and "Sơn Tùng M-TP <Live>" in text.get_content()
    # Its time on the clock of its zone (12:30 UTC is 19:30 in Hanoi).
    assert "2027-03-01 19:30 (Asia/Ho_Chi_Minh)" in text.get_content()
    assert "138.00 EUR" in text.get_content()
    assert f"/e/{booking.event_id}" in html_text
    assert sorted(_qr_codes(message)) == sorted(booking.codes)
    assert (await _delivery(pool, booking, Kind.TICKETS))[:2] == ("SENT", 1)


async def test_a_crash_between_send_and_mark_resends_with_the_same_message_id(
    stores: Stores, pool: Pool, redis: aioredis.Redis, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay

    async def die(delivery: Delivery) -> None:
        raise ConnectionResetError("the mailer died here")

    booking = await make_booking(pool)
    async with mailer_of(stores, environ, name="doomed", hooks=MailHooks(after_send=die)) as doomed:
        await publish(redis, doomed.config.stream, booking)
        await doomed.consumer.read_once(block_ms=100)
    assert (await _delivery(pool, booking, Kind.TICKETS))[0] == "PENDING"
    # Another mailer claims what the dead one left pending.
    claiming = {**environ, "BOXOFFICE_CONSUMER_CLAIM_IDLE_MS": "1"}
    async with mailer_of(stores, claiming, name="survivor") as survivor:
        assert await survivor.consumer.claim_once() == 1
    messages = state.messages()
    assert len(messages) == 2
    assert len({m["Message-ID"] for m in messages}) == 1
    assert (await _delivery(pool, booking, Kind.TICKETS))[0] == "SENT"


async def test_try_later_twice_then_accepted_delivers_once(
    stores: Stores, pool: Pool, redis: aioredis.Redis, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    state.data_answers[:] = ["451 4.3.0 Try again later", "451 4.3.0 Try again later"]
    booking = await make_booking(pool)
    async with mailer_of(stores, environ) as role:
        await publish(redis, role.config.stream, booking)
        await role.consumer.read_once(block_ms=100)
        assert role.metrics.messages.labels(kind="tickets", outcome="retried")._value.get() == 2
    assert len(state.messages()) == 1
    assert await _delivery(pool, booking, Kind.TICKETS) == ("SENT", 3, state.messages()[0]["Message-ID"])


async def test_a_refused_address_is_recorded_failed_and_sent_again_on_resend(
    stores: Stores, pool: Pool, redis: aioredis.Redis, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    state.rcpt_answers[:] = ["550 5.1.1 No such user here"]
    booking = await make_booking(pool)
    async with mailer_of(stores, environ) as role:
        await publish(redis, role.config.stream, booking)
        await role.consumer.read_once(block_ms=100)
        assert role.metrics.messages.labels(kind="tickets", outcome="failed")._value.get() == 1
        failed = await role.store.not_delivered(booking.event_id)
        assert [(d.hold_id, d.state) for d in failed] == [(booking.hold_id, DeliveryState.FAILED)]
        assert "550" in failed[0].last_error
        assert state.messages() == []
        # The operator's resend: the same message, once the address is mended.
        reopened = await role.store.reopen(booking.hold_id)
        assert [d.kind for d in reopened] == [Kind.TICKETS]
        for delivery in reopened:
            await role.mailer.deliver(delivery, created_at=0.0)
    assert len(state.messages()) == 1
    assert state.messages()[0]["Message-ID"] == failed[0].message_id
    assert (await _delivery(pool, booking, Kind.TICKETS))[0] == "SENT"


async def test_a_refund_sends_the_tickets_void_message(
    stores: Stores, pool: Pool, redis: aioredis.Redis, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    booking = await make_booking(pool, language="pt-BR")
    async with mailer_of(stores, environ) as role:
        await publish(redis, role.config.stream, booking)
        await publish(redis, role.config.stream, booking, kind="BookingCancelled")
        await role.consumer.read_once(block_ms=100)
        await publish(redis, role.config.stream, booking, kind="BookingCancelled")
        await role.consumer.read_once(block_ms=100)
    messages = state.messages()
    assert len(messages) == 2
    assert len({m["Message-ID"] for m in messages}) == 2
    void = messages[1]
    assert "anulados" in str(void["Subject"])
    body = void.get_body(preferencelist=("plain",))
    assert isinstance(body, EmailMessage)
    for code in booking.codes:
        assert code in body.get_content()
    assert _qr_codes(void) == []
    assert (await _delivery(pool, booking, Kind.VOID))[0] == "SENT"


async def test_no_address_sends_nothing_and_the_booking_says_so(
    stores: Stores, pool: Pool, redis: aioredis.Redis, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    booking = await make_booking(pool, email=None)
    async with mailer_of(stores, environ) as role:
        await publish(redis, role.config.stream, booking)
        await role.consumer.read_once(block_ms=100)
        assert [d.state for d in await role.store.not_delivered(booking.event_id)] == [DeliveryState.NO_ADDRESS]
    assert state.messages() == []


async def test_tickets_not_issued_yet_leave_the_entry_pending(
    stores: Stores, pool: Pool, redis: aioredis.Redis, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    early = Booking(hold_id="6f2a4a57-5d3b-4b8e-9a4e-1f4c0c6f9d11", event_id=1, codes=())
    async with mailer_of(stores, environ) as role:
        await publish(redis, role.config.stream, early)
        await role.consumer.read_once(block_ms=100)
        assert role.metrics.consumer.failed._value.get() == 1
        pending = await redis.xpending(role.config.stream, "mailer")
        assert pending["pending"] == 1
    assert state.messages() == []
