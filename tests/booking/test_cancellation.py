"""The cancellation quote and the check of a quote a cancel carries, as
functions (booking_svc.cancellation): the same rules decide both, so they
agree at every instant, the window's last one included."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from booking_svc.cancellation import granted_for_quote, quote
from booking_svc.model import Hold, HoldState, Money, RefundPolicy
from boxoffice.errors import FailedPrecondition, InvalidArgument

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
UNTIL = NOW + timedelta(days=1)


def _booking(state: HoldState = HoldState.CONFIRMED, amount: int = 9999) -> Hold:
    return Hold(
        hold_id=uuid.uuid4(),
        event_id=1,
        customer_id="fan",
        section_id="A",
        quantity=1,
        state=state,
        amount=Money("EUR", amount),
        expires_at=NOW,
        created_at=NOW,
        confirmed_at=NOW,
        payment_id="pay",
        refund_amount_minor=None,
        seats=(),
    )


def test_the_quote_holds_until_the_windows_last_instant_and_rounds_down() -> None:
    policy = RefundPolicy(UNTIL, 80)
    for at in (NOW, UNTIL):
        found = quote(_booking(), policy, at)
        assert (found.allowed, found.refund_minor, found.reason, found.until) == (True, 7999, "", UNTIL)
        assert granted_for_quote(_booking(), policy, at, Money("EUR", 7999)) == 7999
    late = quote(_booking(), policy, UNTIL + timedelta(microseconds=1))
    assert (late.allowed, late.refund_minor, late.reason) == (False, 0, "REFUND_WINDOW_CLOSED")


@pytest.mark.parametrize("policy", [RefundPolicy(None, 100), RefundPolicy(UNTIL, 0), RefundPolicy(UNTIL, 1)])
def test_a_policy_that_grants_nothing_allows_no_cancel(policy: RefundPolicy) -> None:
    # 1% of 99 cents rounds down to nothing.
    found = quote(_booking(amount=99), policy, NOW)
    assert (found.allowed, found.reason) == (False, "REFUND_NOT_ALLOWED")
    with pytest.raises(FailedPrecondition) as err:
        granted_for_quote(_booking(amount=99), policy, NOW, Money("EUR", 1))
    assert err.value.reason == "REFUND_NOT_ALLOWED"


def test_only_a_confirmed_booking_is_quoted() -> None:
    for state in (HoldState.HELD, HoldState.CANCELLED, HoldState.EXPIRED, HoldState.RELEASED):
        found = quote(_booking(state), RefundPolicy(UNTIL, 100), NOW)
        assert (found.allowed, found.reason) == (False, "BOOKING_NOT_CONFIRMED")


def test_a_cancel_never_grants_more_than_its_quote_nor_less_without_refusing() -> None:
    policy = RefundPolicy(UNTIL, 50)
    # A smaller quote than the policy's grants the quote only.
    assert granted_for_quote(_booking(), policy, NOW, Money("EUR", 100)) == 100
    # The window closed since the quote: refused, not a smaller refund.
    with pytest.raises(FailedPrecondition) as closed:
        granted_for_quote(_booking(), policy, UNTIL + timedelta(seconds=1), Money("EUR", 4999))
    assert closed.value.reason == "REFUND_WINDOW_CLOSED"
    assert closed.value.metadata["until"] == "2026-06-02T12:00:00Z"
    # More than the policy ever grants, or another currency: bad input.
    for quoted, field in ((Money("EUR", 5000), "amount_minor"), (Money("USD", 4999), "currency_code")):
        with pytest.raises(InvalidArgument) as bad:
            granted_for_quote(_booking(), policy, NOW, quoted)
        assert bad.value.metadata["field"] == f"quoted_refund.{field}"
