"""Running a call under an idempotency key, with Stripe's contract.

The first request with a key claims it (IN_FLIGHT); its final answer, an
error included, is stored and every later request with the key gets it
replayed. The same key with other parameters (another fingerprint) is
INVALID_ARGUMENT; a request while the first is still in flight is ABORTED.
A retryable failure (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, a crash)
releases the key, because the work behind it is safe to run again. The
holder leases the key and renews the lease while its work runs (every third
of the lease); a claim whose holder died (killed, cut off from Postgres) is
taken over as soon as its lease lapses, seconds later. A request that finds
the key in flight may still be answered at once when what it asks is already
done (``settled``: a confirm whose payment already succeeded).
Keys are forgotten after their retention. The keys themselves live behind
:class:`~payment_svc.ports.IdempotencyStore`.

A key belongs to the customer whose payment the call acts on, or to the
payment id alone when no such payment exists (:func:`key_scope`): keys are
never one namespace for everyone, so a call on a made-up payment id cannot
store an answer under a key that a real customer uses later, while one
customer reusing a key for another of their payments is still refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import grpc

from boxoffice.errors import Aborted, BoxofficeError
from payment_svc.ports import IdempotencyStore, Stored

T = TypeVar("T")

# The reason of the ABORTED a request gets while its key is in flight.
IN_FLIGHT = "IDEMPOTENCY_KEY_IN_FLIGHT"

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


def key_scope(method: str, payment_id: str, customer_id: str | None) -> str:
    """The namespace of ``method``'s idempotency keys for a call on
    ``payment_id``, whose customer is ``customer_id`` (None: no such payment)."""
    if customer_id is None:
        return f"{method}/payment:{payment_id}"
    return f"{method}/customer:{customer_id}"


def fingerprint(*parts: str) -> bytes:
    """A digest of a request's parameters."""
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).digest()


class Idempotent:
    """Runs work under an idempotency key (see the module docstring)."""

    def __init__(self, store: IdempotencyStore, *, lease_seconds: float) -> None:
        self._store = store
        self._renew_every = lease_seconds / 3

    async def run(
        self,
        scope: str,
        key: str,
        fingerprint: bytes,
        work: Callable[[], Awaitable[T]],
        encode: Callable[[T], bytes],
        decode: Callable[[bytes], T],
        settled: Callable[[], Awaitable[T | None]] | None = None,
    ) -> T:
        """``work``'s answer under the key. ``settled``: the answer when the
        key is in flight, if what the request asks is done already (None: it
        is not, and the request is ABORTED as in flight)."""
        try:
            outcome = await self._store.claim(scope, key, fingerprint)
        except Aborted as err:
            if settled is None or err.reason != IN_FLIGHT:
                raise
            done = await settled()
            if done is None:
                raise
            return done
        if isinstance(outcome, Stored):
            if outcome.error is not None:
                raise outcome.error
            return decode(outcome.response)
        token = outcome.token
        try:
            async with leased(lambda: self._store.renew(scope, key, token), every_seconds=self._renew_every):
                result = await work()
        except BoxofficeError as err:
            if err.code in RETRYABLE_CODES:
                await detached(self._store.release(scope, key, token))
            else:
                await detached(self._store.complete(scope, key, token, err))
            raise
        except BaseException:
            await detached(self._store.release(scope, key, token))
            raise
        await detached(self._store.complete(scope, key, token, encode(result)))
        return result


@contextlib.asynccontextmanager
async def leased(renew: Callable[[], Awaitable[bool]], *, every_seconds: float) -> AsyncIterator[None]:
    """Hold a leased claim (an idempotency key, a webhook delivery) while
    the block runs: ``renew`` is called every ``every_seconds`` (a third of
    the lease) in a task of its own, until the block ends or ``renew`` says
    the claim is not the holder's any more (taken over: its answer will not
    be stored). A holder that dies stops renewing, and its claim is taken
    over once the lease lapses."""

    async def renewing() -> None:
        while True:
            await asyncio.sleep(every_seconds)
            try:
                if not await renew():
                    return
            except Exception:  # Postgres away: try again; the lease may lapse meanwhile
                continue

    renewal = asyncio.get_running_loop().create_task(renewing(), context=contextvars.Context())
    try:
        yield
    finally:
        renewal.cancel()


async def detached(work: Coroutine[Any, Any, None]) -> None:
    """Finish bookkeeping even if the caller is cancelled or out of time: it
    runs in a task of its own, outside the call's deadline. A failure here
    leaves the key (or webhook claim) to be taken over after its lock time."""
    task = asyncio.get_running_loop().create_task(work, context=contextvars.Context())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        raise
    except Exception:
        return
