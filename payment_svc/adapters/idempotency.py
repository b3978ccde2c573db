"""Idempotency keys in Postgres (the :class:`~payment_svc.ports.IdempotencyStore`).

A key's row is claimed by one statement: a new key is inserted IN_FLIGHT; an
expired one, or one whose holder stopped renewing its lease (its lock older
than the lease), is taken over; else the row says what the key holds. The
holder renews the lease while it works (:meth:`PgIdempotencyStore.renew`),
so the lease can be seconds: a holder that died is replaced that soon. The row
keeps the key's first answer: status 0 and the response, or a final error
as its canonical code's number and a JSON body (message, reason, metadata).
This module is the one place where an error becomes such a row and such a
row becomes the domain error again.
"""

from __future__ import annotations

import json
import uuid

import grpc

from boxoffice import db
from boxoffice.errors import Aborted, BoxofficeError, InvalidArgument, error_class_for_code
from boxoffice.runtime import Pool
from payment_svc.ports import Claimed, IdempotencyStore, Stored

_OK = 0
_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _row(outcome: bytes | BoxofficeError) -> tuple[int, bytes]:
    """What the row keeps of an answer: (0, response) or (code, error body)."""
    if isinstance(outcome, bytes):
        return _OK, outcome
    body = {"message": outcome.message, "reason": outcome.reason, "metadata": outcome.metadata}
    return outcome.code.value[0], json.dumps(body, separators=(",", ":")).encode()


def _stored(status_code: int, response: bytes) -> Stored:
    """The answer a row replays."""
    if status_code == _OK:
        return Stored(response=response)
    body = json.loads(response)
    cls = error_class_for_code(_STATUS_CODES.get(status_code, grpc.StatusCode.INTERNAL))
    return Stored(error=cls(body["message"], reason=body["reason"], metadata=body["metadata"]))


class PgIdempotencyStore:
    def __init__(self, pool: Pool, *, retention_seconds: int, lease_seconds: float) -> None:
        self._pool = pool
        self._retention = retention_seconds
        self._lease = lease_seconds

    @db.repeated_when_lost
    async def claim(self, scope: str, key: str, fingerprint: bytes) -> Claimed | Stored:
        token = str(uuid.uuid4())
        async with db.transaction(self._pool) as conn:
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
                        AND k.locked_at < now() - make_interval(secs => %(lease)s))
                RETURNING 1
                """,
                {
                    "scope": scope,
                    "key": key,
                    "fp": fingerprint,
                    "token": token,
                    "retention": self._retention,
                    "lease": self._lease,
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
        return _stored(int(row[2]), bytes(row[3]))

    @db.repeated_when_lost
    async def complete(self, scope: str, key: str, token: str, outcome: bytes | BoxofficeError) -> None:
        status_code, response = _row(outcome)
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                """
                UPDATE payment_idempotency_keys
                   SET state = 'DONE', status_code = %s, response = %s, lock_token = NULL
                 WHERE scope = %s AND key = %s AND lock_token = %s
                """,
                (status_code, response, scope, key, token),
            )

    @db.repeated_when_lost
    async def renew(self, scope: str, key: str, token: str) -> bool:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                "UPDATE payment_idempotency_keys SET locked_at = now() "
                "WHERE scope = %s AND key = %s AND lock_token = %s AND state = 'IN_FLIGHT'",
                (scope, key, token),
            )
            return cur.rowcount == 1

    @db.repeated_when_lost
    async def release(self, scope: str, key: str, token: str) -> None:
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                "DELETE FROM payment_idempotency_keys WHERE scope = %s AND key = %s AND lock_token = %s",
                (scope, key, token),
            )

    @db.repeated_when_lost
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


def _compliance(store: PgIdempotencyStore) -> IdempotencyStore:
    return store
