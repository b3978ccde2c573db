"""Cutting a connection of the code under test in the middle of its own
transaction: the test locks a row, the code's statement waits for it inside
its transaction, and the test ends that backend (pg_terminate_backend)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from tests.support import Stores

# How long the test waits for a statement to queue behind its lock.
_WAIT_SECONDS = 30.0


async def _blocked_by(admin: psycopg.AsyncConnection[Any], locker: int, *, besides: set[int]) -> int:
    """The backend (not one of ``besides``) whose statement waits for a lock
    that ``locker`` holds; polled until one does."""
    async with asyncio.timeout(_WAIT_SECONDS):
        while True:
            cur = await admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid)) AND NOT pid = ANY(%s)",
                (locker, list(besides)),
            )
            row = await cur.fetchone()
            if row is not None:
                return int(row[0])
            await asyncio.sleep(0.02)


async def cut_once_inside(
    stores: Stores, lock: str, params: tuple[Any, ...], work: Callable[[], Awaitable[Any]]
) -> tuple[asyncio.Future[Any], list[int]]:
    """Lock a row (``lock``, a ``SELECT ... FOR UPDATE``), start ``work``,
    end the backend that waits for the row inside its transaction, then let
    the row go once a second backend (the retry's, if any) waits for it or
    ``work`` has ended. Returns ``work``'s future and the backends that waited."""
    async with (
        await psycopg.AsyncConnection.connect(stores.admin_url, autocommit=True) as admin,
        await psycopg.AsyncConnection.connect(stores.database_url) as locker,
    ):
        cur = await locker.execute(lock, params)
        assert await cur.fetchone() is not None, "nothing to lock"
        task = asyncio.ensure_future(work())
        first = await _blocked_by(admin, locker.info.backend_pid, besides=set())
        cur = await admin.execute("SELECT pg_terminate_backend(%s)", (first,))
        assert await cur.fetchone() == (True,)
        waited = [first]
        retry = asyncio.ensure_future(_blocked_by(admin, locker.info.backend_pid, besides={first}))
        await asyncio.wait([task, retry], return_when=asyncio.FIRST_COMPLETED)
        if retry.done():
            waited.append(retry.result())
        else:
            retry.cancel()
        await locker.rollback()
    return task, waited
