"""A database migrated by the versioned history the baseline replaced
(0001-0010, read from git at the commit before the baseline) upgrades in
place: every row kept, holds still held or confirmed, stored ConfirmHold
answers replayed as first given, and new holds work."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from booking_svc import app as booking_app
from boxoffice import db
from boxoffice.errors import FailedPrecondition, NotFound
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from tests.booking.harness import audit, booking_server, call, hold_request
from tests.support import Stores, unavailable

# The last commit whose booking_svc/migrations held the versioned history.
HISTORY_COMMIT = "f15b5c7"
REPO = Path(__file__).resolve().parents[2]

TABLES = {
    "events": "event_id",
    "sections": "event_id, section_id",
    "section_stripes": "event_id, section_id, stripe",
    "seat_rows": "event_id, section_id, row_label",
    "seats": "event_id, seat_id",
    "holds": "hold_id",
    "hold_seats": "hold_id, seat_id",
    "hold_requests": "event_id, customer_id, request_id",
    "confirmations": "idempotency_key",
    "outbox": "seq",
}


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def history() -> list[db.Migration]:
    """Booking's versioned migrations as they were at HISTORY_COMMIT."""
    try:
        names = _git("ls-tree", "--name-only", HISTORY_COMMIT, "booking_svc/migrations/").split()
    except (OSError, subprocess.CalledProcessError):
        unavailable(
            f"git history with commit {HISTORY_COMMIT} is not available "
            "(a shallow clone: scripts/ops_deps.sh fetches the history)"
        )
    found = []
    for path in names:
        name = path.rsplit("/", 1)[-1]
        match = re.match(r"^(\d{4})_", name)
        assert match is not None, name
        found.append(db.Migration("booking", int(match.group(1)), name, _git("show", f"{HISTORY_COMMIT}:{path}")))
    assert [m.version for m in found] == list(range(1, 11))
    return found


@pytest.fixture
async def old_database(stores: Stores) -> AsyncIterator[Stores]:
    name = f"boxoffice_upgrade_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(stores.admin_url, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}"'.encode())
    url = stores.database_url.rsplit("/", 1)[0] + "/" + name
    try:
        yield dataclasses.replace(stores, database_url=url)
    finally:
        async with await psycopg.AsyncConnection.connect(stores.admin_url, autocommit=True) as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


OLD_HOLD = "SELECT hold_id FROM booking_hold_seats(%s, %s, %s, %s, %s, %s, %s, %s, %s, 0, 5000)"
OLD_CONFIRM = "SELECT outcome FROM booking_confirm_hold(%s, %s, %s, %s, %s, %s, 5000)"


async def _fill(conn: psycopg.AsyncConnection[Any], event_id: int, now: datetime) -> dict[str, Any]:
    """An event as today's main made it, and holds in several states made by
    the old functions."""
    await conn.execute(
        "INSERT INTO events (event_id, display_name, kind, starts_at, hold_ttl_seconds, max_seats_per_customer) "
        "VALUES (%s, 'Old event', 'CONCERT', %s, 600, 8)",
        (event_id, now),
    )
    await conn.execute(
        "INSERT INTO sections (event_id, section_id, display_name, kind, capacity, overbook_limit, price_minor, "
        "currency) VALUES (%s, 'A', 'Section A', 'SEATED', 20, 0, 5000, 'EUR'), "
        "(%s, 'G', 'Floor', 'GENERAL_ADMISSION', 10, 2, 3000, 'EUR')",
        (event_id, event_id),
    )
    await conn.execute(
        "INSERT INTO seat_rows VALUES (%s, 'A', 'R1', 1, 1, 10), (%s, 'A', 'R2', 11, 1, 10)", (event_id, event_id)
    )
    await conn.execute(
        "INSERT INTO seats (event_id, seat_id, section_id, row_label, seat_number, label) "
        "SELECT %s, g, 'A', CASE WHEN g <= 10 THEN 'R1' ELSE 'R2' END, (g - 1) %% 10 + 1, 'A-' || g "
        "FROM generate_series(1, 20) g",
        (event_id,),
    )
    await conn.execute(
        "INSERT INTO section_stripes (event_id, section_id, stripe, capacity) "
        "SELECT %s, 'A', g, (SELECT count(*) FROM generate_series(1, 20) s WHERE s %% 16 = g) "
        "FROM generate_series(0, 15) g",
        (event_id,),
    )
    await conn.execute(
        "INSERT INTO section_stripes (event_id, section_id, stripe, capacity) VALUES (%s, 'G', 0, 12)", (event_id,)
    )

    async def hold(
        customer: str, seats: list[int] | None, section: str | None, quantity: int | None, request_id: str | None = None
    ) -> uuid.UUID:
        hold_id = uuid.uuid4()
        # The request fingerprint as the service has always written it.
        text = "seats:" + ",".join(map(str, seats)) if seats else f"best:{section}:{quantity}"
        fingerprint = hashlib.sha256(text.encode()).hexdigest()[:32]
        cur = await conn.execute(
            OLD_HOLD, (event_id, customer, seats, section, quantity, hold_id, request_id, fingerprint, now)
        )
        row = await cur.fetchone()
        assert row is not None and row[0] == hold_id
        return hold_id

    held = await hold("c1", [1, 2], None, None, request_id="r1")
    floor = await hold("c2", None, "G", 2)
    sold = await hold("c3", [3], None, None)
    cur = await conn.execute(OLD_CONFIRM, (sold, "k-sold", "pay-3", 5000, "EUR", now))
    row = await cur.fetchone()
    assert row is not None and "hold" in row[0]
    mismatched = await hold("c4", [4], None, None)
    cur = await conn.execute(OLD_CONFIRM, (mismatched, "k-mismatch", "pay-4", 1, "EUR", now))
    row = await cur.fetchone()
    assert row is not None and row[0]["error"]["code"] == "FAILED_PRECONDITION"
    unknown = uuid.uuid4()
    cur = await conn.execute(OLD_CONFIRM, (unknown, "k-unknown", "pay-5", 1, "EUR", now))
    row = await cur.fetchone()
    assert row is not None and row[0]["error"]["code"] == "NOT_FOUND"
    released = await hold("c5", [5, 6], None, None)
    await conn.execute(
        "UPDATE seats SET status = 'AVAILABLE', hold_id = NULL, hold_expires_at = NULL WHERE hold_id = %s",
        (released,),
    )
    await conn.execute("UPDATE holds SET state = 'RELEASED', ended_at = %s WHERE hold_id = %s", (now, released))
    await conn.execute("SELECT booking_move_counters(%s, 'A', ARRAY[5, 6]::bigint[], 0, -1, 0)", (event_id,))
    return {"held": held, "floor": floor, "sold": sold, "mismatched": mismatched, "unknown": unknown}


async def _rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of booking's tables, as column -> value."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        out = {}
        for table, key in TABLES.items():
            cur = await conn.execute(f"SELECT * FROM {table} ORDER BY {key}".encode())
            out[table] = await cur.fetchall()
        return out


def _as_before(rows: dict[str, list[dict[str, Any]]], before: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """``rows`` with only the columns ``before`` had (later migrations add
    columns; every row and every old value must be kept)."""
    columns = {table: list(before[table][0]) if before[table] else [] for table in before}
    return {table: [{c: r[c] for c in columns[table]} for r in rows[table]] for table in rows}


async def test_a_database_of_the_old_history_upgrades_in_place(old_database: Stores) -> None:
    url = old_database.database_url
    assert len(await db.migrate(url, history())) == 10
    event_id = 4242
    now = datetime.now(UTC)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ids = await _fill(conn, event_id, now)
    before = await _rows(url)

    applied = await db.migrate(url, booking_app.migrations())
    # Booking's own files and the audit log its admin API writes to.
    assert applied and all(name.startswith(("booking/", "booking-audit/")) for name in applied)
    assert "booking/0011_baseline.sql" not in applied  # recorded, not run
    after = await _rows(url)
    assert _as_before(after, before) == before
    # Events made before the ticket limit take their max_seats_per_customer as theirs.
    assert [e["max_tickets_per_customer"] for e in after["events"]] == [None]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT version FROM schema_migrations WHERE component = 'booking' ORDER BY 1")
        assert [r[0] for r in await cur.fetchall()] == [
            m.version for m in booking_app.migrations() if not m.is_repeatable and m.component == "booking"
        ]
    assert await db.migrate(url, booking_app.migrations()) == []

    async with booking_server(old_database) as booking:
        booking.clock.advance(1)
        got = (
            await booking.stub.GetHold(
                pb.GetHoldRequest(access_token=booking.token("c1", event_id), hold_id=str(ids["held"]))
            )
        ).hold
        assert got.state == pb.HOLD_STATE_HELD and [s.seat_id for s in got.seats] == [1, 2]
        event = (await booking.stub.GetEvent(pb.GetEventRequest(event_id=event_id))).event
        assert (event.max_seats_per_customer, event.max_tickets_per_customer) == (8, 8)
        floor = (
            await booking.stub.GetHold(
                pb.GetHoldRequest(access_token=booking.token("c2", event_id), hold_id=str(ids["floor"]))
            )
        ).hold
        assert floor.state == pb.HOLD_STATE_HELD and floor.quantity == 2
        # The stored answers replay as they were first given.
        replayed = (
            await booking.stub.ConfirmHold(
                pb.ConfirmHoldRequest(
                    hold_id=str(ids["sold"]),
                    idempotency_key="k-sold",
                    payment_id="pay-3",
                    amount_paid=pb.Money(currency_code="EUR", amount_minor=5000),
                )
            )
        ).hold
        assert replayed.state == pb.HOLD_STATE_CONFIRMED and replayed.payment_id == "pay-3"
        assert [s.seat_id for s in replayed.seats] == [3]
        _, err = await call(
            booking.stub.ConfirmHold(
                pb.ConfirmHoldRequest(
                    hold_id=str(ids["mismatched"]),
                    idempotency_key="k-mismatch",
                    payment_id="pay-4",
                    amount_paid=pb.Money(currency_code="EUR", amount_minor=1),
                )
            )
        )
        assert isinstance(err, FailedPrecondition) and err.reason == "AMOUNT_MISMATCH"
        assert err.metadata["expected_amount_minor"] == "5000"
        _, err = await call(
            booking.stub.ConfirmHold(
                pb.ConfirmHoldRequest(
                    hold_id=str(ids["unknown"]),
                    idempotency_key="k-unknown",
                    payment_id="pay-5",
                    amount_paid=pb.Money(currency_code="EUR", amount_minor=1),
                )
            )
        )
        assert isinstance(err, NotFound) and err.reason == "HOLD_NOT_FOUND"
        # A retried HoldSeats with the old request id replays the old hold.
        again = await booking.stub.HoldSeats(
            hold_request(booking.token("c1", event_id), event_id, [1, 2], request_id="r1")
        )
        assert again.hold.hold_id == str(ids["held"])
        # New holds and confirms work on the old rows.
        _, taken = await call(booking.stub.HoldSeats(hold_request(booking.token("c6", event_id), event_id, [2, 7])))
        assert isinstance(taken, FailedPrecondition) and taken.reason == "SEAT_UNAVAILABLE"
        new = (await booking.stub.HoldSeats(hold_request(booking.token("c6", event_id), event_id, [5, 6]))).hold
        assert new.state == pb.HOLD_STATE_HELD
        more = (
            await booking.stub.HoldSeats(hold_request(booking.token("c7", event_id), event_id, section="G", quantity=3))
        ).hold
        assert more.quantity == 3
        confirmed = (
            await booking.stub.ConfirmHold(
                pb.ConfirmHoldRequest(
                    hold_id=str(ids["held"]),
                    idempotency_key="k-held",
                    payment_id="pay-1",
                    amount_paid=pb.Money(currency_code="EUR", amount_minor=10000),
                )
            )
        ).hold
        assert confirmed.state == pb.HOLD_STATE_CONFIRMED
        await audit(booking, event_id)
