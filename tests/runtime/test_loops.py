"""The event loop: the mesh's processes and this suite run on uvloop by
default, and what talks to sockets itself works on both loops."""

from __future__ import annotations

import asyncio
import os

import pytest
import uvloop

from boxoffice import loops
from boxoffice.config import ConfigError, Env
from boxoffice.redis import ScriptBatcher
from tests.runtime.test_script_batcher import _script
from tests.support import Stores


def test_the_default_is_uvloop_and_a_bad_name_is_refused() -> None:
    assert loops.loop_name(Env({})) == "uvloop"
    assert loops.loop_name(Env({"BOXOFFICE_EVENT_LOOP": "asyncio"})) == "asyncio"
    with pytest.raises(ConfigError, match="BOXOFFICE_EVENT_LOOP"):
        loops.loop_name(Env({"BOXOFFICE_EVENT_LOOP": "trio"}))


async def test_the_suite_runs_on_the_configured_loop() -> None:
    name = Env(os.environ).choice("BOXOFFICE_TEST_EVENT_LOOP", loops.DEFAULT, loops.LOOPS)
    running = asyncio.get_running_loop()
    assert isinstance(running, uvloop.Loop) == (name == "uvloop")


@pytest.mark.parametrize("name", loops.LOOPS)
def test_the_pipelined_redis_connection_works_on_each_loop(name: str, stores: Stores) -> None:
    """The script batcher's own pipelined connection on each loop (uvloop's
    transport is no asyncio.Transport subclass: a check for one failed every
    call on uvloop)."""

    async def calls() -> list[object]:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(stores.redis_url)
        batcher = ScriptBatcher(client)
        try:
            return list(
                await asyncio.gather(*(batcher.call(_script("return ARGV[1]"), (), (str(i),)) for i in range(50)))
            )
        finally:
            await batcher.stop(1)
            await client.aclose()

    assert loops.run(calls(), name) == [str(i).encode() for i in range(50)]
