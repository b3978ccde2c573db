"""The mailer tests' fixtures: the stores' pool and Redis, a real relay
(aiosmtpd with STARTTLS and AUTH), the mailer's settings for it, and the
whole mesh behind an edge for the tests that buy through it."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from boxoffice.runtime import Pool
from tests.edge.harness import EdgeStack, edge_stack
from tests.mail.harness import relay_environ
from tests.mail.relay import PASSWORD, RelayState, smtp_relay
from tests.payment.harness import open_pool, open_redis
from tests.support import Stores


@pytest.fixture
async def pool(stores: Stores) -> AsyncIterator[Pool]:
    async with open_pool(stores) as opened:
        yield opened


@pytest.fixture
async def redis(stores: Stores) -> AsyncIterator[aioredis.Redis]:
    async with open_redis(stores) as opened:
        yield opened


@pytest.fixture
def relay(stores: Stores) -> Iterator[tuple[int, RelayState]]:
    identity = stores.pki.issue(f"smtp-{secrets.token_hex(3)}", "spiffe://test/smtp")
    with smtp_relay(identity) as started:
        yield started


@pytest.fixture
def environ(stores: Stores, relay: tuple[int, RelayState], tmp_path: Path) -> dict[str, str]:
    password = tmp_path / "smtp-password"
    password.write_text(PASSWORD + "\n")
    return relay_environ(stores, relay[0], f"mail-test-{secrets.token_hex(4)}", str(password))


@pytest.fixture
def prefix() -> str:
    """The prefix of the mesh's ticket streams, this test's own."""
    return f"mail-mesh-{secrets.token_hex(3)}"


@pytest.fixture
async def mesh(stores: Stores, prefix: str) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix=prefix) as opened:
        yield opened
