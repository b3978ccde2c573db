"""A pool whose transactions join the audit's transaction when one is open.

Stores open their own transactions with :func:`boxoffice.db.transaction`
(``BEGIN; SET LOCAL statement_timeout ...`` ... ``COMMIT`` on a pooled
connection). An admin action must write its change and its audit row in
one transaction, without the stores knowing about auditing, so the store
an admin servicer uses is built on a :class:`JoinablePool`: outside an
audited action it hands out the real pool's connections; inside one it
hands out the action's connection, on which the store's ``BEGIN`` becomes a
savepoint, its ``COMMIT`` releases the savepoint and its ``ROLLBACK`` rolls
back to it. Nothing is committed until the audit row is written.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from typing import Any, cast

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]

_SAVEPOINT = "boxoffice_audit_join"

# The connection of the audited action running in this task, if any.
_ACTION: ContextVar[AsyncConnection[TupleRow] | None] = ContextVar("boxoffice_audit_action", default=None)


@contextlib.contextmanager
def bound(conn: AsyncConnection[TupleRow]) -> Iterator[None]:
    """Within the block, joinable pools hand out ``conn`` (in a transaction)."""
    token = _ACTION.set(conn)
    try:
        yield
    finally:
        _ACTION.reset(token)


def _joined_statement(query: Any) -> Any:
    """The statement a store's transaction control becomes on a joined
    connection; any other statement unchanged."""
    if not isinstance(query, (bytes, str)):
        return query
    text = query.decode() if isinstance(query, bytes) else query
    word = text.strip().upper()
    if word == "COMMIT":
        return f"RELEASE SAVEPOINT {_SAVEPOINT}".encode()
    if word == "ROLLBACK":
        return f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}; RELEASE SAVEPOINT {_SAVEPOINT}".encode()
    if word == "BEGIN" or word.startswith("BEGIN;"):
        return f"SAVEPOINT {_SAVEPOINT}{text.strip()[len('BEGIN') :]}".encode()
    return query


class _JoinedConnection:
    """The action's connection as a store sees it: transaction control
    becomes a savepoint; everything else is the connection's own."""

    def __init__(self, conn: AsyncConnection[TupleRow]) -> None:
        self._conn = conn

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        return await self._conn.execute(_joined_statement(query), params, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class JoinablePool:
    """A pool for the stores of an admin API (see the module's docstring)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    @contextlib.asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[AsyncConnection[TupleRow]]:  # noqa: ASYNC109 (the pool's signature)
        action = _ACTION.get()
        if action is None:
            async with self._pool.connection(timeout=timeout) as conn:
                yield conn
            return
        yield cast(AsyncConnection[TupleRow], _JoinedConnection(action))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def joinable(pool: Pool) -> Pool:
    """``pool`` as stores take it, joining audited actions' transactions."""
    return cast(Pool, JoinablePool(pool))
