"""Start a process's components, wait for SIGTERM/SIGINT, stop them in
reverse order within the grace period, and await every background task."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

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
        task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=max(grace_seconds, 0.1))
        except (asyncio.CancelledError, TimeoutError):
            pass
        except Exception:  # already logged by _run
            pass


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
        # What start-up allocated lives as long as the process: keep it out
        # of the collector's full passes (they stall a process holding tens
        # of thousands of streams).
        gc.freeze()
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
