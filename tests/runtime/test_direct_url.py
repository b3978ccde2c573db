"""DATABASE_DIRECT_URL carries the session advisory locks: the migrations'
lock and the leader election's. Here DATABASE_URL names a port nobody
listens on, so anything that went through it would fail."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

from boxoffice.config import Env
from boxoffice.leader import create_leadership
from boxoffice.runtime import Runtime
from tests.support import Stores

_NOWHERE = "postgresql://postgres@127.0.0.1:1/nowhere"


async def test_the_leader_election_uses_the_direct_url(stores: Stores) -> None:
    env = Env(
        {
            "DATABASE_URL": _NOWHERE,
            "DATABASE_DIRECT_URL": stores.database_url,
            "BOXOFFICE_LEADER_RETRY_SECONDS": "0.2",
            "BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS": "1",
            "BOXOFFICE_LEADER_LEASE_SECONDS": "2",
        }
    )
    rt = Runtime.from_env(env, database_url=_NOWHERE, redis_url="redis://127.0.0.1:1/0")
    assert rt.direct_database_url == stores.database_url
    led = asyncio.Event()

    async def lead(epoch: int) -> None:
        led.set()
        await asyncio.Event().wait()

    campaign = asyncio.create_task(create_leadership(rt, f"direct-{uuid.uuid4().hex[:8]}").run(lead))
    try:
        async with asyncio.timeout(30):  # a bound for a broken build, not a timing claim
            await led.wait()
    finally:
        campaign.cancel()
        await asyncio.gather(campaign, return_exceptions=True)


async def test_boxoffice_migrate_uses_the_direct_url(stores: Stores) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("BOXOFFICE_")}
    env.update({"DATABASE_URL": _NOWHERE, "DATABASE_DIRECT_URL": stores.database_url})
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "boxoffice_cli",
        "migrate",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    assert out.decode().strip() == "schema is up to date"
    # Without the direct URL the same command names the unreachable one.
    env.pop("DATABASE_DIRECT_URL")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "boxoffice_cli", "migrate", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await process.communicate()
    assert process.returncode == 2
    assert err.decode().startswith("boxoffice: cannot reach Postgres")
