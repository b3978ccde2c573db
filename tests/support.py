"""Helpers for tests: stores, a clock tests move, running components."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from boxoffice.config import Env
from boxoffice.db import Migration
from boxoffice.lifecycle import Component
from boxoffice.runtime import Runtime


@dataclass(frozen=True)
class Stores:
    database_url: str
    redis_url: str
    admin_url: str
    tmp: Path


class ManualClock:
    """Wall-clock time that starts now and moves only when told."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def all_migrations() -> list[Migration]:
    from booking_svc import app as booking_app
    from payment_svc import app as payment_app
    from queue_svc import app as queue_app

    return [*queue_app.migrations(), *booking_app.migrations(), *payment_app.migrations()]


@contextlib.asynccontextmanager
async def running(components: Sequence[Component], grace_seconds: float = 2.0) -> AsyncIterator[None]:
    """Start components in order; stop them in reverse order afterwards."""
    started: list[Component] = []
    try:
        for component in components:
            await component.start()
            started.append(component)
        yield
    finally:
        for component in reversed(started):
            await component.stop(grace_seconds)


def make_runtime(stores: Stores, *, environ: dict[str, str] | None = None, clock: ManualClock | None = None) -> Runtime:
    """A Runtime on loopback port 0 against the test stores."""
    env = Env({"BOXOFFICE_GRPC_PORT": "0", **(environ or {})})
    return Runtime.from_env(env, database_url=stores.database_url, redis_url=stores.redis_url, clock=clock)
