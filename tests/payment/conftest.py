"""Fixtures of the payment tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from boxoffice.runtime import Pool
from tests.payment.support import FakeBooking, PaymentStack, open_pool, payment_stack, signer
from tests.support import Stores


@pytest.fixture
async def pool(stores: Stores) -> AsyncIterator[Pool]:
    async with open_pool(stores) as opened:
        yield opened


@pytest.fixture
def booking(pool: Pool) -> FakeBooking:
    return FakeBooking(pool, signer())


@pytest.fixture
async def stack(pool: Pool, booking: FakeBooking) -> AsyncIterator[PaymentStack]:
    async with payment_stack(pool, booking, tokens=booking.tokens) as opened:
        yield opened
