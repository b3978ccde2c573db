"""Concurrent calls gathered into batches, one batch per round trip.

Each call joins the batch being gathered. With no batch out, it goes out
as soon as the event loop is free: an idle process sends each call at once.
While a batch is out, calls gather; when it returns with fewer than
``overlap_min`` calls waiting, the next batch lingers up to
``linger_seconds`` for more (or until ``overlap_min`` wait), and when
``overlap_min`` calls wait it goes at once, even while another batch is
out (up to ``max_in_flight``). So a busy process sends large batches, which
cost less per call on both sides of the round trip, and more than one at a
time only when a single one cannot keep up. A caller waits only as long as
its deadline allows; a caller that gives up before its batch goes out is
left out of it.
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
        overlap_min: int | None = None,
        linger_seconds: float = 0.0,
    ) -> None:
        if max_batch < 1 or max_in_flight < 1:
            raise ValueError("max_batch and max_in_flight must be at least 1")
        self.name = name
        self._process = process
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        # Calls waiting that send a batch while another is out (default: half
        # a batch).
        self._overlap_min = max(1, max_batch // 2) if overlap_min is None else max(1, overlap_min)
        self._linger = linger_seconds
        self._timer: asyncio.TimerHandle | None = None
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
        """Send what is lingering at once, then wait for the batches out.
        (Calls that come later are still served.)"""
        if self._timer is not None:
            self._timer.cancel()
            self._flush()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=max(grace_seconds, 0.1))

    async def submit(self, item: T) -> R:
        """``item``'s outcome: its result, or its error raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, future))
        if self._timer is not None and len(self._pending) >= self._overlap_min:
            # Lingering, and enough have come: no need to wait longer.
            self._timer.cancel()
            self._timer = None
            self._scheduled = False
        if not self._scheduled and self._may_send():
            self._scheduled = True
            # A fresh context: the flush (and the batch it starts) must not
            # run under this caller's deadline scope.
            loop.call_soon(self._flush, context=contextvars.Context())
        async with deadline.bounded():
            return await future

    def _may_send(self) -> bool:
        if self._in_flight == 0:
            return True
        return self._in_flight < self._max_in_flight and len(self._pending) >= self._overlap_min

    def _flush(self) -> None:
        self._scheduled = False
        self._timer = None
        pending = self._pending
        while pending and self._may_send():
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
            if self._pending and not self._scheduled and self._may_send():
                self._scheduled = True
                loop = asyncio.get_running_loop()
                if self._linger and self._in_flight == 0 and len(self._pending) < self._overlap_min:
                    self._timer = loop.call_later(self._linger, self._flush, context=contextvars.Context())
                else:
                    loop.call_soon(self._flush, context=contextvars.Context())
