"""A waiting-list offer's e-mail to its fan, against a real relay and real
Postgres: one message per offer (its hold), in the fan's language, saying
the event, the section, the seats, the price and until when they are held,
with the link to the event's page; sent once whatever the sweeps' repeats
and however many mailers sweep; an offer taken, declined or lapsed before
its turn sends nothing; a fan without a verified address is recorded so.

Each test's offer goes to an address of its own, and only those messages
are counted: the sweeps also send what other tests of the same database
left due (another offer, a transfer's claim link) to this test's relay."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage

import pytest

from boxoffice import db
from boxoffice.runtime import Pool
from mail_svc.adapters.deliveries import PgDeliveryStore
from mail_svc.model import LANGUAGES, DeliveryState, Kind, OfferMail
from mail_svc.render import Renderer
from tests.mail.harness import FLIGHT, mailer_of, make_booking
from tests.mail.relay import RelayState
from tests.support import Stores

# The customer ids of the offers planted here.
_FANS = "wl-fan-%"


@pytest.fixture(autouse=True)
async def _planted_offers_end(pool: Pool) -> AsyncIterator[None]:
    """Each test's planted entries and holds go when it ends: booking's offer
    pass, which other tests of this database run, takes only its own."""
    yield
    async with db.transaction(pool) as conn:
        await conn.execute(
            "DELETE FROM hold_seats WHERE hold_id IN (SELECT hold_id FROM holds WHERE customer_id LIKE %s)", (_FANS,)
        )
        await conn.execute("DELETE FROM holds WHERE customer_id LIKE %s", (_FANS,))
        await conn.execute("DELETE FROM waitlist_entries WHERE customer_id LIKE %s", (_FANS,))


@dataclass(frozen=True)
class Offer:
    hold_id: str
    event_id: int
    customer_id: str
    email: str
    expires_at: datetime


async def make_offer(
    pool: Pool,
    *,
    language: str = "en",
    with_address: bool = True,
    entry_state: str = "OFFERED",
    hold_state: str = "HELD",
    lasts: timedelta = timedelta(minutes=15),
    seats: Sequence[str] = ("B-7", "B-8"),
) -> Offer:
    """A fan's open offer as booking's offer job leaves it: the fan's entry
    OFFERED on the event's waiting list, and its hold of the seats in the
    fan's name, lapsing at the offer's end. The fan's address is that of a
    payment they made before (another booking of theirs), when asked."""
    customer_id = f"wl-fan-{secrets.token_hex(6)}"
    quantity = max(1, len(seats))
    email = f"{customer_id}@example.test"
    # A paid booking of the event (its payment is not the fan's).
    booking = await make_booking(pool, seats=1, email="someone-else@example.test")
    hold_id = str(uuid.uuid4())
    now = datetime.now(UTC)
    expires_at = (now + lasts).replace(microsecond=0)
    async with db.transaction(pool) as conn:
        if with_address:
            await conn.execute(
                """
                INSERT INTO payments (payment_id, hold_id, attempt, event_id, customer_id, amount_minor, currency,
                                      payment_method, state, provider_idempotency_key, notify_email, notify_language)
                VALUES (%s, %s, 1, %s, %s, 6900, 'EUR', 'pm_card_ok', 'SUCCEEDED', %s, %s, %s)
                """,
                (
                    str(uuid.uuid4()),
                    str(uuid.uuid4()),
                    booking.event_id,
                    customer_id,
                    f"mail-test-{hold_id}",
                    email,
                    language,
                ),
            )
        await conn.execute(
            """
            INSERT INTO holds (hold_id, event_id, customer_id, section_id, quantity, state, amount_minor, currency,
                               expires_at, created_at)
            VALUES (%s, %s, %s, 'B', %s, %s, %s, 'EUR', %s, %s)
            """,
            (hold_id, booking.event_id, customer_id, quantity, hold_state, 6900 * quantity, expires_at, now),
        )
        for number, label in enumerate(seats, start=1):
            await conn.execute(
                """
                INSERT INTO hold_seats (hold_id, event_id, seat_id, row_label, seat_number, label)
                VALUES (%s, %s, %s, 'B', %s, %s)
                """,
                (hold_id, booking.event_id, booking.event_id * 100 + number, number, label),
            )
        await conn.execute(
            """
            INSERT INTO waitlist_entries (event_id, customer_id, section_id, quantity, state, joined_at,
                                          offer_hold_id, offered_at, ended_at)
            VALUES (%s, %s, 'B', %s, %s, %s, %s, %s, %s)
            """,
            (
                booking.event_id,
                customer_id,
                quantity,
                entry_state,
                now - timedelta(hours=1),
                hold_id,
                now,
                None if entry_state == "OFFERED" else now,
            ),
        )
    return Offer(hold_id, booking.event_id, customer_id, email, expires_at)


def _ours(state: RelayState, offer: Offer) -> list[EmailMessage]:
    return [m for m in state.messages() if m["To"] == offer.email]


def _parts(message: EmailMessage) -> tuple[str, str]:
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert isinstance(text, EmailMessage) and isinstance(html, EmailMessage)
    return str(text.get_content()), str(html.get_content())


async def _delivery(pool: Pool, offer: Offer) -> tuple[str, str, str] | None:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT state, message_id, last_error FROM mail_deliveries WHERE hold_id = %s AND kind = 'offer'",
            (offer.hold_id,),
        )
        row = await cur.fetchone()
    return None if row is None else (row[0], row[1], row[2])


@pytest.mark.parametrize(
    ("language", "lead", "until_label", "price_label"),
    [
        ("en", "they are held for you", "Held for you until", "Price"),
        ("vi", "ghế đang được giữ cho bạn", "Giữ cho bạn đến", "Giá"),
        ("pt-BR", "eles estão reservados para você", "Reservado para você até", "Preço"),
    ],
)
async def test_an_offer_sends_its_fan_one_message(
    stores: Stores,
    pool: Pool,
    relay: tuple[int, RelayState],
    environ: dict[str, str],
    language: str,
    lead: str,
    until_label: str,
    price_label: str,
) -> None:
    _, state = relay
    offer = await make_offer(pool, language=language)
    settings = {**environ, "BOXOFFICE_MAIL_TICKETS_URL": "https://tickets.example/e/{event_id}"}
    async with mailer_of(stores, settings) as role:
        assert await role.offers.run_once() >= 1
        # Again: the delivery record says it went; nothing more is sent.
        assert await role.offers.run_once() == 0
        await role.sweep.run_once()
    (message,) = _ours(state, offer)
    assert message["Content-Language"] == language
    text, html = _parts(message)
    for part in (text, html):
        assert lead in part
        assert "Sơn Tùng M-TP" in part and "B-7, B-8" in part
        assert "138.00 EUR" in part and price_label in part
        # Until when, on the event's clock (Hà Nội is UTC+7).
        until = offer.expires_at + timedelta(hours=7)
        assert f"{until:%Y-%m-%d %H:%M} (Asia/Ho_Chi_Minh)" in part and until_label in part
    link = f"https://tickets.example/e/{offer.event_id}"
    assert link in text and f'href="{link}"' in html
    assert "&lt;Live&gt;" in html
    assert await _delivery(pool, offer) == ("SENT", message["Message-ID"], "")


async def test_a_standing_offer_says_its_quantity(
    stores: Stores, pool: Pool, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    offer = await make_offer(pool, seats=())
    async with mailer_of(stores, environ) as role:
        await role.offers.run_once()
    (message,) = _ours(state, offer)
    text, _ = _parts(message)
    assert "Seats: 1\n" in text and "Seat numbers: General admission" in text and "69.00 EUR" in text


async def test_two_mailers_sweeping_at_once_send_one_message(
    stores: Stores, pool: Pool, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    offers = [await make_offer(pool) for _ in range(5)]
    async with mailer_of(stores, environ, name="one") as one, mailer_of(stores, environ, name="two") as two:
        for _ in range(3):
            await asyncio.gather(one.offers.run_once(), two.offers.run_once())
    for offer in offers:
        (message,) = _ours(state, offer)
        assert await _delivery(pool, offer) == ("SENT", message["Message-ID"], "")


@pytest.mark.parametrize(
    ("entry_state", "hold_state", "lasts"),
    [
        ("TAKEN", "CONFIRMED", timedelta(minutes=15)),
        ("LEFT", "RELEASED", timedelta(minutes=15)),
        ("LAPSED", "EXPIRED", timedelta(minutes=-1)),
        # Run out, not yet marked so by booking's job.
        ("OFFERED", "HELD", timedelta(seconds=-1)),
    ],
)
async def test_an_offer_no_longer_open_sends_nothing(
    stores: Stores,
    pool: Pool,
    relay: tuple[int, RelayState],
    environ: dict[str, str],
    entry_state: str,
    hold_state: str,
    lasts: timedelta,
) -> None:
    _, state = relay
    offer = await make_offer(pool, entry_state=entry_state, hold_state=hold_state, lasts=lasts)
    async with mailer_of(stores, environ) as role:
        await role.offers.run_once()
    assert not _ours(state, offer)
    assert await _delivery(pool, offer) is None


async def test_an_offer_that_ends_before_its_send_is_recorded_and_not_sent(
    stores: Stores, pool: Pool, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    """The relay said "later"; the fan bought the seats meanwhile (through
    the page): the resend sweep's turn sends nothing."""
    _, state = relay
    offer = await make_offer(pool)
    settings = {**environ, "BOXOFFICE_MAIL_BUSY_ATTEMPTS": "1"}
    state.data_answers.extend(["451 4.3.0 try again later"] * 200)
    async with mailer_of(stores, settings) as role:
        await role.offers.run_once()
        pending = await _delivery(pool, offer)
        assert pending is not None and pending[0] == "PENDING" and "451" in pending[2]
        state.data_answers.clear()
        async with db.transaction(pool) as conn:
            await conn.execute("UPDATE waitlist_entries SET state = 'TAKEN' WHERE offer_hold_id = %s", (offer.hold_id,))
            await conn.execute("UPDATE holds SET state = 'CONFIRMED' WHERE hold_id = %s", (offer.hold_id,))
            # Left untouched for longer than the resend sweep waits.
            await conn.execute(
                "UPDATE mail_deliveries SET updated_at = now() - interval '1 hour' WHERE hold_id = %s",
                (offer.hold_id,),
            )
        await role.sweep.run_once()
    assert not _ours(state, offer)
    assert await _delivery(pool, offer) == ("FAILED", pending[1], "the offer is no longer open")


async def test_a_relay_saying_later_is_tried_again_with_the_same_message_id(
    stores: Stores, pool: Pool, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    offer = await make_offer(pool)
    settings = {**environ, "BOXOFFICE_MAIL_BUSY_ATTEMPTS": "1"}
    state.data_answers.extend(["451 4.3.0 try again later"] * 200)
    async with mailer_of(stores, settings) as role:
        await role.offers.run_once()
        state.data_answers.clear()
        # Not a new delivery: the offer's stays PENDING for the resend sweep.
        await role.offers.run_once()
        assert not _ours(state, offer)
        async with db.transaction(pool) as conn:
            await conn.execute(
                "UPDATE mail_deliveries SET updated_at = now() - interval '1 hour' WHERE hold_id = %s",
                (offer.hold_id,),
            )
        await role.sweep.run_once()
    (message,) = _ours(state, offer)
    assert await _delivery(pool, offer) == ("SENT", message["Message-ID"], "")


async def test_a_fan_without_a_verified_address_gets_nothing_and_it_is_recorded(
    stores: Stores, pool: Pool, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    offer = await make_offer(pool, with_address=False)
    async with mailer_of(stores, environ) as role:
        await role.offers.run_once()
    assert not _ours(state, offer)
    found = await _delivery(pool, offer)
    assert found is not None and found[0] == "NO_ADDRESS"


async def test_a_bought_offer_leaves_the_bookings_own_deliveries_alone(pool: Pool) -> None:
    """Once bought, the offer's hold is a booking with the same id: an
    operator's view and resend of its e-mails are of the booking's own
    messages, never the offer's."""
    offer = await make_offer(pool, with_address=False)
    store = PgDeliveryStore(pool)
    opened = await store.new_delivery(offer.hold_id, Kind.OFFER, offer.event_id, f"<offer.{offer.hold_id}@x>")
    assert opened is not None
    # A second writer of the same delivery gets nothing to send.
    assert await store.new_delivery(offer.hold_id, Kind.OFFER, offer.event_id, "<other@x>") is None
    await store.mark(offer.hold_id, Kind.OFFER, DeliveryState.NO_ADDRESS)
    assert await store.deliveries(offer.hold_id) == []
    assert await store.queue_resend(offer.hold_id, new_tickets=(offer.event_id, f"<t.{offer.hold_id}@x>")) != []
    kinds = {d.kind: d.state for d in await store.deliveries(offer.hold_id)}
    assert kinds == {Kind.TICKETS: DeliveryState.PENDING}
    found = await _delivery(pool, offer)
    assert found is not None and found[0] == "NO_ADDRESS"


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_offer_template_renders_in_every_language(language: str) -> None:
    """A flight's offer (a route, no venue), its name escaped in the HTML."""
    offer = OfferMail(
        hold_id="9b1d3c1e-6a43-4d9e-8d6f-7a5f0f1b2c3d",
        event=FLIGHT,
        customer_id="fan-7",
        section_id="ECO",
        quantity=2,
        seat_labels=("12A", "12B"),
        amount_minor=2_500_000,
        currency="VND",
        expires_at=datetime(2027, 4, 2, 12, 5, tzinfo=UTC),
        open=True,
    )
    renderer = Renderer(mail_from="Boxoffice <tickets@boxoffice.example>", tickets_url="https://x.example/e/{event_id}")
    message = renderer.render_offer(
        offer, language=language, to="fan@example.test", message_id="<o-1@boxoffice.example>", now=datetime.now(UTC)
    )
    parsed = message_from_bytes(bytes(message), policy=policy.default)
    assert isinstance(parsed, EmailMessage)
    assert parsed["Content-Language"] == language and parsed["Message-ID"] == "<o-1@boxoffice.example>"
    assert "Zero-fare <flight>" in str(parsed["Subject"])
    text, html = _parts(parsed)
    assert f'<html lang="{language}">' in html
    assert "Zero-fare &lt;flight&gt;" in html and "<flight>" not in html
    for part in (text, html):
        assert "VJ123 SGN → GRU" in part and "ECO" in part and "12A, 12B" in part and "2500000 VND" in part
        # 12:05 UTC on 2 April is 09:05 in São Paulo; the flight leaves at 20:45 there.
        assert "2027-04-02 09:05 (America/Sao_Paulo)" in part and "2027-05-01 20:45 (America/Sao_Paulo)" in part
    assert "https://x.example/e/7" in text and 'href="https://x.example/e/7"' in html
    assert not [p for p in parsed.walk() if p.get_content_type() == "image/png"]
