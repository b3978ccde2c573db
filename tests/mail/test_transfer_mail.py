"""A ticket transfer's e-mail to the friend, against a real relay and real
Postgres: one message per transfer, in the sender's language, with the claim
link (the transfer and its secret in the link's fragment); sent once
whatever the sweep's repeats; a transfer withdrawn before its turn sends
nothing."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from email.message import EmailMessage

import pytest

from boxoffice import ticketcodes
from boxoffice.clock import SystemClock
from boxoffice.config import Env
from boxoffice.runtime import Pool
from payment_svc.adapters.transfers import PgTransferStore
from payment_svc.model import Transfer
from tests.mail.harness import Booking, mailer_of, make_booking
from tests.mail.relay import RelayState
from tests.support import Stores


@pytest.fixture
def environ(environ: dict[str, str]) -> dict[str, str]:
    """The relay's settings (conftest.py), and the claim page's address."""
    return {**environ, "BOXOFFICE_MAIL_CLAIM_URL": "https://tickets.example/claim"}


def _text(message: EmailMessage) -> str:
    body = message.get_body(preferencelist=("plain",))
    assert isinstance(body, EmailMessage)
    return str(body.get_content())


async def _transfer(pool: Pool, booking: Booking, language: str) -> tuple[Transfer, str]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT ticket_id::text FROM tickets WHERE hold_id = %s ORDER BY unit", (booking.hold_id,)
        )
        row = await cur.fetchone()
    assert row is not None
    signer = ticketcodes.TicketCodeSigner(ticketcodes.read_keys(Env({})).get, SystemClock())
    secret = secrets.token_urlsafe(32)
    transfer = await PgTransferStore(pool, codes=signer).create(
        ticket_id=row[0],
        sender_id="fan-1",
        email="friend@example.test",
        language=language,
        secret=secret,
        now=datetime.now(UTC),
    )
    return transfer, secret


@pytest.mark.parametrize(
    ("language", "lead"),
    [
        ("en", "A friend is giving you a ticket."),
        ("vi", "Một người bạn tặng bạn một vé."),
        ("pt-BR", "Um amigo está passando um ingresso para você."),
    ],
)
async def test_a_transfer_sends_the_friend_one_claim_link(
    stores: Stores, pool: Pool, relay: tuple[int, RelayState], environ: dict[str, str], language: str, lead: str
) -> None:
    _, state = relay
    booking = await make_booking(pool, seats=2)
    transfer, secret = await _transfer(pool, booking, language)
    async with mailer_of(stores, environ) as role:
        # (Other tests' transfers in the shared database may go out too.)
        assert await role.transfers.run_once() >= 1
        # Again: the delivery records say they went; nothing more is sent.
        assert await role.transfers.run_once() == 0
    mine = [m for m in state.messages() if transfer.transfer_id in _text(m)]
    (message,) = mine
    assert message["To"] == "friend@example.test"
    assert message["Content-Language"] == language
    link = f"https://tickets.example/claim#{transfer.transfer_id}.{secret}"
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert isinstance(text, EmailMessage) and isinstance(html, EmailMessage)
    assert lead in text.get_content() and lead in html.get_content()
    assert link in text.get_content() and f'href="{link}"' in html.get_content()
    assert "Sơn Tùng M-TP &lt;Live&gt;" in html.get_content() and "A-1" in text.get_content()
    # The ticket's own code is not in the offer: the friend's comes on claiming.
    assert booking.codes[0] not in text.get_content() and booking.codes[0] not in html.get_content()
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT state, message_id FROM mail_deliveries WHERE hold_id = %s AND kind = 'transfer'",
            (transfer.transfer_id,),
        )
        assert await cur.fetchone() == ("SENT", message["Message-ID"])


async def test_a_withdrawn_transfer_sends_nothing(
    stores: Stores, pool: Pool, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    booking = await make_booking(pool, seats=1)
    transfer, _ = await _transfer(pool, booking, "en")
    signer = ticketcodes.TicketCodeSigner(ticketcodes.read_keys(Env({})).get, SystemClock())
    await PgTransferStore(pool, codes=signer).cancel(
        transfer_id=transfer.transfer_id, sender_id="fan-1", now=datetime.now(UTC)
    )
    async with mailer_of(stores, environ) as role:
        await role.transfers.run_once()
    assert not [m for m in state.messages() if transfer.transfer_id in _text(m)]
