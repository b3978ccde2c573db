"""Money in messages is in the currency's major unit, with the decimals
ISO 4217 gives it; metadata keeps minor units."""

from __future__ import annotations

import pytest

from boxoffice.errors import FailedPrecondition
from boxoffice.money import exponent, format_minor_text, format_money
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from tests.booking.harness import booking_server, call, create_event, hold_request, seat_ids, seated
from tests.support import Stores


@pytest.mark.parametrize(
    ("minor", "currency", "text"),
    [
        (13800, "EUR", "138.00 EUR"),
        (5, "EUR", "0.05 EUR"),
        (0, "USD", "0.00 USD"),
        (-250, "GBP", "-2.50 GBP"),
        (5000, "JPY", "5000 JPY"),
        (1500, "KWD", "1.500 KWD"),
        (12345, "CLF", "1.2345 CLF"),
        (100, "jpy", "100 jpy"),
    ],
)
def test_format_money(minor: int, currency: str, text: str) -> None:
    assert format_money(minor, currency) == text


def test_exponents_and_text_amounts() -> None:
    assert [exponent(c) for c in ("EUR", "JPY", "KRW", "BHD", "XYZ")] == [2, 0, 0, 3, 2]
    assert format_minor_text("13800", "EUR") == "138.00 EUR"
    assert format_minor_text("not-a-number", "EUR") == "not-a-number EUR"
    assert format_minor_text(None, None) == "None"


async def _mismatch(stores: Stores, currency: str, price: int, paid: int) -> FailedPrecondition:
    async with booking_server(stores) as booking:
        section = seated("A", price=price)
        section.price.currency_code = currency
        event = await create_event(booking, [section], [("A", "A", 4)])
        seats = await seat_ids(booking, event.event_id, "A")
        token = booking.token("money-fan", event.event_id)
        hold = (await booking.stub.HoldSeats(hold_request(token, event.event_id, seats[:2]))).hold
        wrong = pb.ConfirmHoldRequest(
            hold_id=hold.hold_id,
            idempotency_key=f"money-{currency}",
            payment_id=f"pay-money-{currency}",
            amount_paid=pb.Money(currency_code=currency, amount_minor=paid),
        )
        _, err = await call(booking.stub.ConfirmHold(wrong))
        assert isinstance(err, FailedPrecondition) and err.reason == "AMOUNT_MISMATCH"
        _, again = await call(booking.stub.ConfirmHold(wrong))  # the stored first answer, the same words
        assert isinstance(again, FailedPrecondition) and again.message == err.message
        return err


async def test_amount_mismatch_names_money_in_major_units(stores: Stores) -> None:
    err = await _mismatch(stores, "EUR", 6900, 1)
    assert err.message == "paid 0.01 EUR, the hold costs 138.00 EUR"
    assert err.metadata["expected_amount_minor"] == "13800"
    assert err.metadata["paid_amount_minor"] == "1"


async def test_amount_mismatch_in_a_currency_without_decimals(stores: Stores) -> None:
    err = await _mismatch(stores, "JPY", 5000, 4000)
    assert err.message == "paid 4000 JPY, the hold costs 10000 JPY"
    assert err.metadata["expected_amount_minor"] == "10000"
