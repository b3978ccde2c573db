"""Concurrent calls gathered into batches, one batch per round trip.

Each call joins the batch being gathered; a batch goes out as soon as the
event loop is free and fewer than ``max_in_flight`` batches are out. Under
load, calls gather while the batches in flight run, so a busy process sends
large batches and an idle one sends each call at once (no lingering). A
caller waits only as long as its deadline allows; a caller that gives up
before its batch goes out is left out of it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from boxoffice import deadline

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    """Runs ``process`` over batches of submitted items.

    ``process`` answers one outcome per item, in order: its result, or the
    error to raise to its caller; an exception it raises is every item's
    error. A component: ``stop`` waits for the
    batches in flight.
    """

    def __init__(
        self,
        process: Callable[[list[T]], Awaitable[Sequence[R | BaseException]]],
        *,
        name: str,
        max_batch: int,
        max_in_flight: int,
    ) -> None:
        if max_batch < 1 or max_in_flight < 1:
            raise ValueError("max_batch and max_in_flight must be at least 1")
        self.name = name
        self._process = process
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._pending: deque[tuple[T, asyncio.Future[R]]] = deque()
        self._in_flight = 0
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        # Batches sent and items they carried, for tests and benchmarks.
        self.batches_sent = 0
        self.items_sent = 0

    async def start(self) -> None:
        return None

    async def stop(self, grace_seconds: float) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=max(grace_seconds, 0.1))

    async def submit(self, item: T) -> R:
        """``item``'s outcome: its result, or its error raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, future))
        if not self._scheduled and self._in_flight < self._max_in_flight:
            self._scheduled = True
            # A fresh context: the flush (and the batch it starts) must not
            # run under this caller's deadline scope.
            loop.call_soon(self._flush, context=contextvars.Context())
        async with deadline.bounded():
            return await future

    def _flush(self) -> None:
        self._scheduled = False
        pending = self._pending
        while pending and self._in_flight < self._max_in_flight:
            batch: list[tuple[T, asyncio.Future[R]]] = []
            while pending and len(batch) < self._max_batch:
                entry = pending.popleft()
                if not entry[1].done():  # its caller gave up
                    batch.append(entry)
            if not batch:
                continue
            self._in_flight += 1
            self.batches_sent += 1
            self.items_sent += len(batch)
            task = asyncio.get_running_loop().create_task(self._run(batch), context=contextvars.Context())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            try:
                outcomes: Sequence[R | BaseException] = await self._process([item for item, _ in batch])
                if len(outcomes) != len(batch):
                    raise RuntimeError(f"{self.name}: {len(outcomes)} outcomes for {len(batch)} items")
            except Exception as err:  # every item's error
                outcomes = [err] * len(batch)
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
        finally:
            self._in_flight -= 1
            if self._pending and not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._flush, context=contextvars.Context())
