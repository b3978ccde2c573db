"""Whether the edge takes traffic: not ready until started, not ready from
the moment it starts draining (so that load balancers stop sending), and the
signal that tells open streams to end with a reconnect hint."""

from __future__ import annotations

import asyncio


class EdgeState:
    def __init__(self) -> None:
        self._started = False
        self._draining = asyncio.Event()

    def started(self) -> None:
        self._started = True

    def drain(self) -> None:
        self._draining.set()

    @property
    def ready(self) -> bool:
        return self._started and not self._draining.is_set()

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    async def wait_draining(self) -> None:
        await self._draining.wait()
