"""Start a process's components, wait for SIGTERM/SIGINT, stop them in
reverse order within the grace period, and await every background task."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from boxoffice.errors import BoxofficeError

_log = logging.getLogger("boxoffice.lifecycle")


class Component(Protocol):
    """Something a process runs: a gRPC server, a background loop, a store."""

    name: str

    async def start(self) -> None:
        """Start; return once ready (a server listening, a loop scheduled)."""

    async def stop(self, grace_seconds: float) -> None:
        """Stop: finish or hand back in-flight work within the grace period."""


async def every(
    interval_seconds: float,
    body: Callable[[], Awaitable[object]],
    *,
    failed: Callable[[BoxofficeError], None],
) -> None:
    """Runs ``body`` every ``interval_seconds`` (from the start of one pass
    to the start of the next) until cancelled; a pass that fails with a
    domain error (a store unreachable) is handed to ``failed`` and the next
    pass comes as planned. The body of a :class:`Loop` that polls."""
    loop = asyncio.get_running_loop()
    while True:
        began = loop.time()
        try:
            await body()
        except BoxofficeError as err:
            failed(err)
        await asyncio.sleep(max(0.0, interval_seconds - (loop.time() - began)))


async def cancel_and_wait(task: asyncio.Task[Any], *, seconds: float | None = None, again_after: float = 0.1) -> bool:
    """Cancel ``task`` and wait until it has ended, cancelling it again every
    ``again_after`` seconds while it runs on: code that swallowed one
    cancellation meets another at its next await. (Python 3.11's
    ``asyncio.wait_for`` returns its inner result when that finished as the
    cancellation came; psycopg_pool waits for a connection with it, so a
    loop cancelled just as the pool handed it a connection went on
    running.) Answers whether the task ended within ``seconds`` (None: no
    bound)."""
    loop = asyncio.get_running_loop()
    end = None if seconds is None else loop.time() + seconds
    while not task.done():
        task.cancel()
        wait = again_after if end is None else min(again_after, end - loop.time())
        if wait <= 0:
            return False
        await asyncio.wait((task,), timeout=wait)
    return True


class Loop:
    """A background loop as a component: ``body`` runs until cancelled or
    until it returns; a crash stops the process (``failed`` is set)."""

    def __init__(self, name: str, body: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self._body = body
        self._task: asyncio.Task[None] | None = None
        self.failed: asyncio.Event = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        try:
            await self._body()
        except asyncio.CancelledError:
            raise
        except Exception:
            _log.exception("background loop crashed", extra={"component": self.name})
            self.failed.set()
            raise

    async def stop(self, grace_seconds: float) -> None:
        task = self._task
        if task is None:
            return
        grace = max(grace_seconds, 0.1)
        # Cancelled again halfway through the grace period, not sooner: the
        # body's own clean-up (a leader handing its lock back) runs undisturbed.
        if not await cancel_and_wait(task, seconds=grace, again_after=grace / 2):
            _log.warning("background loop did not stop within the grace period", extra={"component": self.name})
        elif not task.cancelled():
            task.exception()  # a crash, already logged by _run: retrieved here


# The cyclic garbage collector's thresholds for a process of the mesh, which
# holds many long-lived objects (tens of thousands of open streams, each a
# task, a transport and a request) and makes short-lived ones on every call:
# a young collection every 50,000 surviving allocations instead of 700, and a
# full one only after 100 of those. The default thresholds ran a full
# collection, which walks every stream's objects (seconds at 20,000 streams),
# again and again while streams opened and in the middle of a fan-out.
GC_THRESHOLDS = (50_000, 20, 100)


async def close_here(items: object) -> None:
    """Close an async generator in the calling task. One left at its
    ``yield`` (its consumer stopped between two items) is otherwise closed
    later by the event loop's finalizer, in another task and context, so its
    ``finally`` blocks run late or fail. An iterator without ``aclose`` is
    left as it is."""
    aclose = getattr(items, "aclose", None)
    if aclose is not None:
        await aclose()


def settle_gc() -> None:
    """Once the process has started (:func:`run` calls it): the start-up
    heap (modules, contracts' descriptors, configuration) is frozen out of
    every later collection, and collections run at :data:`GC_THRESHOLDS`
    (the benchmarks' bare servers settle the same way)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def run(
    components: Sequence[Component],
    *,
    grace_seconds: float,
    stop: asyncio.Event | None = None,
    on_started: Callable[[], None] | None = None,
) -> None:
    """Run ``components`` until SIGTERM/SIGINT (or ``stop`` is set, or a
    background loop fails), then stop them in reverse order."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not the main thread
            pass
    started: list[Component] = []
    watchers: list[asyncio.Task[None]] = []
    try:
        for component in components:
            await component.start()
            started.append(component)
            if isinstance(component, Loop):
                watchers.append(asyncio.create_task(_stop_when(component.failed, stop)))
        # What start-up allocated lives as long as the process: out of the
        # collector's passes, which run less often (see GC_THRESHOLDS).
        settle_gc()
        if on_started is not None:
            on_started()
        await stop.wait()
        _log.info("shutting down", extra={"grace_seconds": grace_seconds})
    finally:
        for component in reversed(started):
            try:
                await component.stop(grace_seconds)
            except Exception:
                _log.exception("error while stopping", extra={"component": component.name})
        for watcher in watchers:
            watcher.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _stop_when(failed: asyncio.Event, stop: asyncio.Event) -> None:
    await failed.wait()
    stop.set()
