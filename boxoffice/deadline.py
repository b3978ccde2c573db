"""Deadlines that travel with a call, down to SQL and Redis.

The server's call wrapper records each call's deadline (the client's, clamped to
the server default) in a context variable; storage code asks
:func:`remaining` for its budget, bounds its awaits with :func:`bounded` and
its SQL with ``statement_timeout``. Background jobs open their own scope with
:func:`scope`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar, Token

from boxoffice.errors import DeadlineExceeded

_DEADLINE: ContextVar[float | None] = ContextVar("boxoffice_deadline", default=None)

# Budget for work started outside any call (startup, background loops).
FALLBACK_SECONDS = 5.0


def clamp(time_remaining: float | None, default_seconds: float) -> float:
    """A call's budget: the client's remaining time, never more than the default."""
    if time_remaining is None:
        return default_seconds
    return max(0.0, min(time_remaining, default_seconds))


@contextlib.contextmanager
def scope(seconds: float) -> Iterator[None]:
    """Run the enclosed work under a deadline ``seconds`` from now (never
    later than an enclosing one)."""
    deadline = time.monotonic() + seconds
    outer = _DEADLINE.get()
    if outer is not None:
        deadline = min(deadline, outer)
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def enter(seconds: float) -> Token[float | None]:
    """What :func:`scope` does, until :func:`leave` (the call wrapper's
    path, without a context manager's generator)."""
    deadline = time.monotonic() + seconds
    outer = _DEADLINE.get()
    if outer is not None and outer < deadline:
        deadline = outer
    return _DEADLINE.set(deadline)


def leave(token: Token[float | None]) -> None:
    _DEADLINE.reset(token)


@contextlib.contextmanager
def detached(seconds: float) -> Iterator[None]:
    """Run the enclosed work under its own deadline ``seconds`` from now,
    whatever the enclosing scope says: work shared by several calls (one
    load that many callers wait for) must not end with the first caller's
    deadline. Each caller still bounds its own wait."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def remaining(default_seconds: float = FALLBACK_SECONDS) -> float:
    """Seconds left in the current scope; ``default_seconds`` outside any.

    Raises DeadlineExceeded when the time is already up, so that no new
    Redis or SQL work starts for a call nobody waits for.
    """
    deadline = _DEADLINE.get()
    if deadline is None:
        return default_seconds
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded("deadline exceeded before the work started", reason="DEADLINE_EXCEEDED")
    return left


def statement_timeout_ms(default_seconds: float = FALLBACK_SECONDS) -> int:
    """The Postgres ``statement_timeout`` for work in the current scope."""
    return max(1, int(remaining(default_seconds) * 1000))


@contextlib.asynccontextmanager
async def bounded(default_seconds: float = FALLBACK_SECONDS) -> AsyncIterator[None]:
    """Bound the enclosed awaits by the current scope; time-out becomes
    DeadlineExceeded."""
    try:
        async with asyncio.timeout(remaining(default_seconds)):
            yield
    except TimeoutError:
        raise DeadlineExceeded("deadline exceeded", reason="DEADLINE_EXCEEDED") from None
