"""Idempotency keys with Stripe's contract.

The first request with a key claims it (a UNIQUE row, IN_FLIGHT); its final
answer, an error included, is stored and every later request with the key
gets it replayed. The same key with other parameters (another fingerprint)
is INVALID_ARGUMENT; a request while the first is still in flight is
ABORTED. A retryable failure (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, a
crash) releases the key, because the work behind it is safe to run again. A
claim whose owner died is taken over once its lock is older than the lock
time. Keys are forgotten after their retention.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc

from boxoffice import db
from boxoffice.errors import Aborted, BoxofficeError, Internal, InvalidArgument
from boxoffice.runtime import Pool

T = TypeVar("T")

RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
    }
)

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def fingerprint(*parts: str) -> bytes:
    """A digest of a request's parameters."""
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).digest()


@dataclass(frozen=True, slots=True)
class Claimed:
    """This request owns the key and must complete or release it."""

    token: str


@dataclass(frozen=True, slots=True)
class Stored:
    """The key's first answer: status 0 and a response, or an error."""

    status_code: int
    response: bytes


class IdempotencyStore(Protocol):
    async def claim(self, scope: str, key: str, fingerprint: bytes) -> Claimed | Stored:
        """Own the key, or its stored answer; INVALID_ARGUMENT on another
        fingerprint, ABORTED while another request holds it."""

    async def complete(self, scope: str, key: str, token: str, status_code: int, response: bytes) -> None: ...

    async def release(self, scope: str, key: str, token: str) -> None: ...

    async def purge_expired(self, limit: int) -> int: ...


class PgIdempotencyStore:
    def __init__(self, pool: Pool, *, retention_seconds: int, lock_seconds: int) -> None:
        self._pool = pool
        self._retention = retention_seconds
        self._lock = lock_seconds

    async def claim(self, scope: str, key: str, fingerprint: bytes) -> Claimed | Stored:
        token = str(uuid.uuid4())
        async with db.transaction(self._pool) as conn:
            # One statement: a new key is inserted; an expired one, or one
            # whose owner stopped renewing, is taken over; else nothing.
            cur = await conn.execute(
                """
                INSERT INTO payment_idempotency_keys AS k
                       (scope, key, fingerprint, state, lock_token, locked_at, expires_at)
                VALUES (%(scope)s, %(key)s, %(fp)s, 'IN_FLIGHT', %(token)s, now(),
                        now() + make_interval(secs => %(retention)s))
                ON CONFLICT (scope, key) DO UPDATE
                   SET fingerprint = excluded.fingerprint, state = 'IN_FLIGHT', lock_token = excluded.lock_token,
                       locked_at = now(), status_code = NULL, response = NULL, created_at = now(),
                       expires_at = excluded.expires_at
                 WHERE k.expires_at < now()
                    OR (k.state = 'IN_FLIGHT' AND k.fingerprint = excluded.fingerprint
                        AND k.locked_at < now() - make_interval(secs => %(lock)s))
                RETURNING 1
                """,
                {
                    "scope": scope,
                    "key": key,
                    "fp": fingerprint,
                    "token": token,
                    "retention": self._retention,
                    "lock": self._lock,
                },
            )
            if await cur.fetchone() is not None:
                return Claimed(token)
            cur = await conn.execute(
                "SELECT fingerprint, state, status_code, response FROM payment_idempotency_keys "
                "WHERE scope = %s AND key = %s",
                (scope, key),
            )
            row = await cur.fetchone()
        if row is None:  # deleted between the two statements: a retry claims it
            raise Aborted("the idempotency key is changing; retry", reason="IDEMPOTENCY_KEY_IN_FLIGHT")
        if bytes(row[0]) != fingerprint:
            raise InvalidArgument(
                "the idempotency key was used with other parameters",
                reason="IDEMPOTENCY_KEY_REUSED",
                metadata={"idempotency_key": key[:255]},
            )
        if row[1] == "IN_FLIGHT":
            raise Aborted(
                "a request with this idempotency key is in flight; retry",
                reason="IDEMPOTENCY_KEY_IN_FLIGHT",
                metadata={"idempotency_key": key[:255]},
            )
        return Stored(int(row[2]), bytes(row[3]))

    async def complete(self, scope: str, key: str, token: str, status_code: int, response: bytes) -> None:
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                """
                UPDATE payment_idempotency_keys
                   SET state = 'DONE', status_code = %s, response = %s, lock_token = NULL
                 WHERE scope = %s AND key = %s AND lock_token = %s
                """,
                (status_code, response, scope, key, token),
            )

    async def release(self, scope: str, key: str, token: str) -> None:
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                "DELETE FROM payment_idempotency_keys WHERE scope = %s AND key = %s AND lock_token = %s",
                (scope, key, token),
            )

    async def purge_expired(self, limit: int) -> int:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                DELETE FROM payment_idempotency_keys WHERE ctid IN (
                    SELECT ctid FROM payment_idempotency_keys WHERE expires_at < now() LIMIT %s)
                """,
                (limit,),
            )
            return cur.rowcount


def encode_error(err: BoxofficeError) -> bytes:
    return json.dumps(
        {"message": err.message, "reason": err.reason, "metadata": err.metadata}, separators=(",", ":")
    ).encode()


def decode_error(status_code: int, response: bytes) -> BoxofficeError:
    body = json.loads(response)
    code = _CODES.get(status_code, grpc.StatusCode.INTERNAL)
    cls = _ERROR_CLASSES.get(code, Internal)
    return cls(body["message"], reason=body["reason"], metadata=body["metadata"])


_ERROR_CLASSES: dict[grpc.StatusCode, type[BoxofficeError]] = {cls.code: cls for cls in BoxofficeError.__subclasses__()}


class Idempotent:
    """Runs work under an idempotency key (see the module docstring)."""

    def __init__(self, store: IdempotencyStore) -> None:
        self._store = store

    async def run(
        self,
        scope: str,
        key: str,
        fingerprint: bytes,
        work: Callable[[], Awaitable[T]],
        encode: Callable[[T], bytes],
        decode: Callable[[bytes], T],
    ) -> T:
        outcome = await self._store.claim(scope, key, fingerprint)
        if isinstance(outcome, Stored):
            if outcome.status_code == 0:
                return decode(outcome.response)
            raise decode_error(outcome.status_code, outcome.response)
        token = outcome.token
        try:
            result = await work()
        except BoxofficeError as err:
            if err.code in RETRYABLE_CODES:
                await detached(self._store.release(scope, key, token))
            else:
                await detached(self._store.complete(scope, key, token, err.code.value[0], encode_error(err)))
            raise
        except BaseException:
            await detached(self._store.release(scope, key, token))
            raise
        await detached(self._store.complete(scope, key, token, 0, encode(result)))
        return result


async def detached(work: Coroutine[Any, Any, None]) -> None:
    """Finish bookkeeping even if the caller is cancelled or out of time: it
    runs in a task of its own, outside the call's deadline. A failure here
    leaves the key to be taken over after its lock time."""
    task = asyncio.get_running_loop().create_task(work, context=contextvars.Context())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        raise
    except Exception:
        return


def _compliance(store: PgIdempotencyStore) -> IdempotencyStore:
    return store
