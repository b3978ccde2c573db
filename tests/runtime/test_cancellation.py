"""A background task that swallowed one cancellation still stops: Python
3.11's ``asyncio.wait_for`` returns its inner result when that finished as
the cancellation came (psycopg_pool waits for a connection with it), and an
admitter cancelled at that moment went on ticking after its process had
stopped it, with its pool closed, holding the role. ``cancel_and_wait``
cancels again while the task runs on; the background loops and the
election's lead use it."""

from __future__ import annotations

import asyncio
import sys

from prometheus_client import CollectorRegistry

from boxoffice.leader._config import LeaderTimings
from boxoffice.leader._elector import Elector, LeaderMetrics
from boxoffice.lifecycle import Loop, cancel_and_wait


class _Stubborn:
    """A body that swallows the first cancellation it meets and goes on."""

    def __init__(self) -> None:
        self.swallowed = 0
        self.passes = 0

    async def run(self) -> None:
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if self.swallowed:
                    raise
                self.swallowed += 1
            self.passes += 1


async def test_a_wait_for_cancelled_as_its_future_completes_is_stopped() -> None:
    loop = asyncio.get_running_loop()

    async def waiter(inner: asyncio.Future[int]) -> None:
        while True:
            await asyncio.wait_for(inner, 5)
            inner = loop.create_future()

    async def cancelled_as_it_completes(*, again: bool) -> asyncio.Task[None]:
        """The waiter cancelled just as its inner future completes: once, or
        by cancel_and_wait (``again``)."""
        inner: asyncio.Future[int] = loop.create_future()
        task = asyncio.create_task(waiter(inner))
        await asyncio.sleep(0)  # waiting in wait_for now
        inner.set_result(1)
        if again:
            assert await cancel_and_wait(task, seconds=5)
        else:
            task.cancel()
            await asyncio.wait((task,), timeout=0.2)
        return task

    control = await cancelled_as_it_completes(again=False)
    if sys.version_info < (3, 12):
        # The one cancellation was swallowed: the task runs on.
        assert not control.done()
        assert await cancel_and_wait(control, seconds=5)
    task = await cancelled_as_it_completes(again=True)
    assert task.cancelled()


async def test_a_task_that_swallows_a_cancellation_is_cancelled_again() -> None:
    body = _Stubborn()
    task = asyncio.create_task(body.run())
    await asyncio.sleep(0.02)
    assert await cancel_and_wait(task, seconds=5, again_after=0.05)
    assert task.cancelled() and body.swallowed == 1


async def test_a_bound_answers_false_for_a_task_that_will_not_stop() -> None:
    release = asyncio.Event()

    async def deaf() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                pass

    task = asyncio.create_task(deaf())
    await asyncio.sleep(0.02)  # running, inside its loop
    assert not await cancel_and_wait(task, seconds=0.2, again_after=0.05)
    assert not task.done()
    release.set()
    await task


async def test_a_loop_whose_body_swallowed_a_cancellation_stops_within_its_grace() -> None:
    body = _Stubborn()
    loop = Loop("stubborn", body.run)
    await loop.start()
    await asyncio.sleep(0.02)
    await loop.stop(1.0)
    passes = body.passes
    await asyncio.sleep(0.05)
    assert body.swallowed == 1 and body.passes == passes  # stopped, not running on


class _MemoryLock:
    """An election lock in memory: free unless held; counts its releases."""

    def __init__(self) -> None:
        self.epoch = 0
        self.held = False
        self.released = 0

    async def try_acquire(self) -> int | None:
        if self.held:
            return None
        self.held, self.epoch = True, self.epoch + 1
        return self.epoch

    async def renew(self) -> bool:
        return self.held

    async def release(self) -> None:
        self.held = False
        self.released += 1

    async def close(self) -> None:
        self.held = False


async def test_the_election_hands_the_role_on_only_once_a_stubborn_lead_stopped() -> None:
    lock = _MemoryLock()
    elector = Elector(
        lock,
        name="stubborn",
        identity="test",
        timings=LeaderTimings(lease_seconds=2.0, renew_deadline_seconds=1.0, retry_seconds=0.05),
        metrics=LeaderMetrics.create(CollectorRegistry()),
    )
    body = _Stubborn()
    leading = asyncio.Event()

    async def lead(epoch: int) -> None:
        leading.set()
        await body.run()

    runner = asyncio.create_task(elector.run(lead))
    await asyncio.wait_for(leading.wait(), 5)
    await asyncio.sleep(0.02)
    runner.cancel()
    await asyncio.wait((runner,), timeout=5)
    assert runner.done()
    passes = body.passes
    await asyncio.sleep(0.05)
    assert body.swallowed == 1 and body.passes == passes
    assert lock.released == 1 and not lock.held
