"""The audit log of admin actions (table ``admin_audit``) and the one place
an admin action is run and recorded: :meth:`Auditor.run`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from boxoffice import caller, db
from boxoffice.errors import BoxofficeError

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]

T = TypeVar("T")

Json = dict[str, Any]

OK = "OK"

# An admin action may load a large inventory: its budget without a client
# deadline (a client's shorter deadline wins).
ACTION_SECONDS = 60.0

_COLUMNS = (
    "audit_id, recorded_at, caller_identity, caller_role, service, method, request, before, after,"
    " outcome, reason, message"
)


def message_json(message: Message) -> Json:
    """A message as the audit stores it: proto3 JSON with field names as in
    the contract, defaults left out."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


@dataclass(frozen=True)
class AuditEntry:
    """One admin action: who, what, when, the resource before and after,
    and the outcome (``OK`` or the canonical code's name, with reason and
    message)."""

    audit_id: int
    recorded_at: datetime
    caller_identity: str | None
    caller_role: str | None
    service: str
    method: str
    request: Json
    before: Json | None
    after: Json | None
    outcome: str
    reason: str | None
    message: str | None


async def _append(
    conn: AsyncConnection[TupleRow],
    *,
    service: str,
    method: str,
    request: Json,
    before: Json | None,
    after: Json | None,
    failure: BoxofficeError | None,
) -> None:
    who = caller.current()
    await conn.execute(
        """
        INSERT INTO admin_audit (caller_identity, caller_role, service, method, request, before, after,
                                 outcome, reason, message)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
        """,
        (
            who.identity,
            who.role,
            service,
            method,
            Jsonb(request),
            None if before is None else Jsonb(before),
            None if after is None else Jsonb(after),
            OK if failure is None else failure.code.name,
            None if failure is None else failure.reason,
            None if failure is None else failure.message,
        ),
    )


class Auditor:
    """Runs admin actions, each with its audit row.

    The stores an action changes must be built on the same pool: their
    ``db.transaction`` then joins the audit's transaction (see
    :func:`boxoffice.db.joining`), so the change and its row commit
    together or not at all. A change in Redis (a mirror of
    the configuration, a fan's place) is made inside the action, after its
    Postgres writes, and the row is written after it.
    """

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def run(
        self,
        method: str,
        request: Message,
        *,
        before: Callable[[], Awaitable[Json | None]],
        action: Callable[[], Awaitable[T]],
        after: Callable[[T], Json | None],
    ) -> T:
        """Run ``action`` of RPC ``method`` (``/package.Service/Method``) on
        ``request`` and record it: ``before`` reads the resource first
        (in the same transaction), ``after`` renders what the action
        answered. An action that fails with a domain error changes nothing
        (its writes roll back), is recorded with its code and reason, and
        its error is raised to the caller."""
        service, _, name = method.lstrip("/").partition("/")
        failure: BoxofficeError | None = None
        result: T | None = None
        async with db.transaction(self._pool, default_seconds=ACTION_SECONDS) as conn:
            with db.joining(self._pool, conn):
                prior = await _read_quietly(before)
                try:
                    async with conn.transaction():
                        result = await action()
                        posterior = after(result)
                except BoxofficeError as err:
                    failure, posterior = err, prior
            await _append(
                conn,
                service=service,
                method=name,
                request=message_json(request),
                before=prior,
                after=posterior,
                failure=failure,
            )
        if failure is not None:
            raise failure
        return result  # type: ignore[return-value]


async def _read_quietly(read: Callable[[], Awaitable[Json | None]]) -> Json | None:
    """The resource before the action; None when it does not exist (the
    action itself answers the error, if any)."""
    try:
        return await read()
    except BoxofficeError:
        return None


async def entries(pool: Pool, *, service: str | None = None, limit: int = 100) -> list[AuditEntry]:
    """The newest ``limit`` rows (of ``service``, if given), newest first."""
    async with db.transaction(pool) as conn:
        cur = await conn.execute(
            f"""
            SELECT {_COLUMNS} FROM admin_audit
             WHERE %(service)s::text IS NULL OR service = %(service)s
             ORDER BY audit_id DESC LIMIT %(limit)s
            """,
            {"service": service, "limit": limit},
        )
        rows = await cur.fetchall()
    return [AuditEntry(*row) for row in rows]
