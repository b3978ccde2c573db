"""At 100,000 events Postgres answers every kind of catalogue search from
its indexes: no sequential scan of events, sections or counters, in a
database of its own (made, migrated, filled and dropped by the test)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from booking_svc import app as booking_app
from boxoffice import db
from tests.booking.catalogue_plans import fill, plans
from tests.support import Stores


@pytest.fixture
async def scratch(stores: Stores) -> AsyncIterator[str]:
    name = f"boxoffice_catalogue_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(stores.admin_url, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}"'.encode())
    url = stores.database_url.rsplit("/", 1)[0] + "/" + name
    try:
        await db.migrate(url, booking_app.migrations())
        yield url
    finally:
        async with await psycopg.AsyncConnection.connect(stores.admin_url, autocommit=True) as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


async def test_no_search_scans_the_events_at_100000(scratch: str) -> None:
    async with await psycopg.AsyncConnection.connect(scratch, autocommit=True) as conn:
        await fill(conn, 100_000)
        found = await plans(conn)
    assert len(found) >= 10
    for plan in found:
        assert not plan.sequential, (plan.name, plan.nodes)
        assert any("Index" in node for node in plan.nodes), (plan.name, plan.nodes)


async def test_the_control_a_search_without_its_index_scans(scratch: str) -> None:
    """The check can fail: with the words' index dropped, a word search
    reads every event."""
    async with await psycopg.AsyncConnection.connect(scratch, autocommit=True) as conn:
        await fill(conn, 20_000)
        await conn.execute(b"DROP INDEX events_catalogue_words")
        await conn.execute(b"DROP INDEX events_catalogue")
        found = {p.name: p for p in await plans(conn)}
    assert found["q=a rare word (venue 5)"].sequential
