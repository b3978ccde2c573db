"""The audit log against the test Postgres: an admin action and its row
commit together or not at all, a refused action is recorded with its code
and changes nothing, the caller is who the call says, and the table is
append-only for real."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator

import psycopg
import pytest

from boxoffice import audit, db
from boxoffice.caller import Caller, acting_as
from boxoffice.errors import AlreadyExists, NotFound
from boxoffice.runtime import Pool
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from tests.support import Stores, make_runtime, running

ITEMS = "audit_test_items"
METHOD = "/boxoffice.queue.v1.QueueAdminService/RevokeCustomer"


class Items:
    """A scratch store built as services build theirs: its own transactions
    through ``db.transaction`` on the pool it is given."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def put(self, key: str, value: int) -> int:
        try:
            async with db.transaction(self._pool) as conn:
                await conn.execute(f"INSERT INTO {ITEMS} (key, value) VALUES (%s, %s)".encode(), (key, value))
        except psycopg.errors.UniqueViolation:
            raise AlreadyExists(f"{key} exists", reason="ITEM_EXISTS", metadata={"key": key}) from None
        return value

    async def put_then_fail(self, key: str, value: int) -> int:
        """Writes, then refuses: a failure after the store's write committed."""
        await self.put(key, value)
        raise NotFound(f"{key} vanished", reason="ITEM_GONE", metadata={"key": key})

    async def get(self, key: str) -> int | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(f"SELECT value FROM {ITEMS} WHERE key = %s".encode(), (key,))
            row = await cur.fetchone()
        return None if row is None else int(row[0])


@contextlib.asynccontextmanager
async def pool_of(stores: Stores) -> AsyncIterator[Pool]:
    rt = make_runtime(stores)
    pool = rt.pool()
    async with running(rt.infrastructure()):
        async with db.transaction(pool) as conn:
            await conn.execute(f"CREATE TABLE IF NOT EXISTS {ITEMS} (key text PRIMARY KEY, value int)".encode())
        yield pool


def _request(customer_id: str) -> apb.RevokeCustomerRequest:
    return apb.RevokeCustomerRequest(event_id=7, customer_id=customer_id)


async def _rows_for(pool: Pool, customer_id: str) -> list[audit.AuditEntry]:
    return [r for r in await audit.entries(pool, limit=1000) if r.request.get("customer_id") == customer_id]


async def _value(items: Items, key: str) -> dict[str, int] | None:
    value = await items.get(key)
    return None if value is None else {"value": value}


async def test_an_action_and_its_row_commit_together_with_the_caller_before_and_after(stores: Stores) -> None:
    key = secrets.token_hex(6)
    operator = Caller(identity="spiffe://boxoffice.local/ns/ops/sa/operator", role="operator")
    async with pool_of(stores) as pool:
        items = Items(pool)
        auditor = audit.Auditor(pool)
        with acting_as(operator):
            got = await auditor.run(
                METHOD,
                _request(key),
                before=lambda: _value(items, key),
                action=lambda: items.put(key, 5),
                after=lambda value: {"value": value},
            )
        assert got == 5 and await items.get(key) == 5
        [row] = await _rows_for(pool, key)
        assert (row.caller_identity, row.caller_role) == (operator.identity, operator.role)
        assert (row.service, row.method) == ("boxoffice.queue.v1.QueueAdminService", "RevokeCustomer")
        assert row.request == {"event_id": "7", "customer_id": key}
        assert (row.before, row.after, row.outcome, row.reason, row.message) == (None, {"value": 5}, "OK", None, None)


async def test_a_refused_action_is_recorded_with_its_code_and_its_writes_roll_back(stores: Stores) -> None:
    key = secrets.token_hex(6)
    async with pool_of(stores) as pool:
        items = Items(pool)
        auditor = audit.Auditor(pool)
        with pytest.raises(NotFound):
            await auditor.run(
                METHOD,
                _request(key),
                before=lambda: _value(items, key),
                action=lambda: items.put_then_fail(key, 9),
                after=lambda value: {"value": value},
            )
        assert await items.get(key) is None  # the write before the refusal rolled back
        [row] = await _rows_for(pool, key)
        assert (row.outcome, row.reason, row.before, row.after) == ("NOT_FOUND", "ITEM_GONE", None, None)
        assert row.caller_identity is None and row.caller_role is None  # no caller outside a call


async def test_a_statement_that_fails_in_the_store_leaves_the_audit_transaction_usable(stores: Stores) -> None:
    key = secrets.token_hex(6)
    async with pool_of(stores) as pool:
        items = Items(pool)
        auditor = audit.Auditor(pool)
        await items.put(key, 1)
        with pytest.raises(AlreadyExists):
            await auditor.run(
                METHOD,
                _request(key),
                before=lambda: _value(items, key),
                action=lambda: items.put(key, 2),  # a unique violation inside the store's transaction
                after=lambda value: {"value": value},
            )
        [row] = await _rows_for(pool, key)
        assert (row.outcome, row.reason, row.before, row.after) == (
            "ALREADY_EXISTS",
            "ITEM_EXISTS",
            {"value": 1},
            {"value": 1},
        )
        assert await items.get(key) == 1


async def test_a_row_that_cannot_be_written_takes_the_change_with_it(stores: Stores) -> None:
    key = secrets.token_hex(6)
    async with pool_of(stores) as pool:
        items = Items(pool)
        auditor = audit.Auditor(pool)
        # jsonb refuses a NUL character: the audit row fails after the change was made.
        with pytest.raises(psycopg.Error):
            await auditor.run(
                METHOD,
                _request(f"{key}\x00"),
                before=lambda: _value(items, key),
                action=lambda: items.put(key, 3),
                after=lambda value: {"value": value},
            )
        assert await items.get(key) is None


async def test_outside_an_action_a_store_commits_on_its_own(stores: Stores) -> None:
    key = secrets.token_hex(6)
    async with pool_of(stores) as pool:
        items = Items(pool)
        assert await items.put(key, 4) == 4
        assert await Items(pool).get(key) == 4
        assert await _rows_for(pool, key) == []


async def test_the_audit_table_is_append_only(stores: Stores) -> None:
    key = secrets.token_hex(6)
    async with pool_of(stores) as pool:
        items = Items(pool)
        await audit.Auditor(pool).run(
            METHOD,
            _request(key),
            before=lambda: _value(items, key),
            action=lambda: items.put(key, 6),
            after=lambda value: {"value": value},
        )
        [row] = await _rows_for(pool, key)
        for statement in (
            "UPDATE admin_audit SET outcome = 'FORGED' WHERE audit_id = %s",
            "DELETE FROM admin_audit WHERE audit_id = %s",
            "TRUNCATE admin_audit",
        ):
            async with await psycopg.AsyncConnection.connect(stores.database_url, autocommit=True) as conn:
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                    params = (row.audit_id,) if "%s" in statement else None
                    await conn.execute(statement.encode(), params)
        assert await _rows_for(pool, key) == [row]


async def test_services_sharing_a_database_each_apply_the_audit_migrations(stores: Stores) -> None:
    # The suite's database has them under "queue-audit", "booking-audit",
    # "checkin-audit" and "payment-audit" (PaymentService's process serves the mail's resends);
    # another service applying them again changes nothing.
    applied = await db.migrate(stores.database_url, audit.migrations("another"))
    assert applied == ["another-audit/0001_admin_audit.sql"]
    assert await db.migrate(stores.database_url, audit.migrations("another")) == []
    async with await psycopg.AsyncConnection.connect(stores.database_url, autocommit=True) as conn:
        cur = await conn.execute(
            b"SELECT component FROM schema_migrations WHERE component LIKE '%-audit' ORDER BY component"
        )
        assert [r[0] for r in await cur.fetchall()] == [
            "another-audit",
            "booking-audit",
            "checkin-audit",
            "payment-audit",
            "queue-audit",
        ]
