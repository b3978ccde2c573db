"""Fixtures of the payment tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from boxoffice.runtime import Pool
from tests.payment.harness import FakeBooking, PaymentStack, fake_booking, open_pool, payment_stack
from tests.support import Stores


@pytest.fixture
async def pool(stores: Stores) -> AsyncIterator[Pool]:
    async with open_pool(stores) as opened:
        yield opened


@pytest.fixture
async def stack(stores: Stores) -> AsyncIterator[PaymentStack]:
    """PaymentService with the in-memory BookingService stand-in."""
    async with payment_stack(stores, booking=fake_booking) as opened:
        yield opened


@pytest.fixture
def booking(stack: PaymentStack) -> FakeBooking:
    """The stand-in the ``stack`` calls."""
    assert isinstance(stack.booking, FakeBooking)
    return stack.booking
