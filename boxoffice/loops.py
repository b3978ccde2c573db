"""The event loop a process of the mesh runs on.

``BOXOFFICE_EVENT_LOOP``: ``uvloop`` (the default: libuv's loop, cheaper per
call and per socket event than asyncio's own) or ``asyncio`` (the standard
library's selector loop, for a platform without uvloop or to compare).
``bench.cpu_per_call`` measures both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from boxoffice.config import Env

T = TypeVar("T")

LOOPS = ("uvloop", "asyncio")
DEFAULT = "uvloop"


def loop_name(env: Env) -> str:
    """The configured loop's name (validated: ConfigError names the setting)."""
    return env.choice("BOXOFFICE_EVENT_LOOP", DEFAULT, LOOPS)


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What builds the named loop (None: asyncio's default)."""
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


def run(main: Coroutine[Any, Any, T], name: str) -> T:
    """``asyncio.run(main)`` on the named loop."""
    with asyncio.Runner(loop_factory=loop_factory(name)) as runner:
        return runner.run(main)
