"""The BookingService server role in its own process, for benchmarks.

Run: ``DATABASE_URL=... python -m bench.booking_server`` - serves on a free
loopback port (prints ``PORT <n>`` once listening) against an already
migrated database, until SIGTERM.
"""

from __future__ import annotations

import asyncio
import os

from booking_svc import app
from boxoffice.config import Env
from boxoffice.lifecycle import run
from boxoffice.runtime import Runtime
from boxoffice.server import GrpcServer


async def _serve() -> None:
    env = Env({"BOXOFFICE_GRPC_PORT": "0", **os.environ})
    rt = Runtime.from_env(
        env, database_url=os.environ["DATABASE_URL"], redis_url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    )
    components = await app.build(rt, "server")
    server = next(c for c in components if isinstance(c, GrpcServer))
    await run(
        [*rt.infrastructure(), *components],
        grace_seconds=1.0,
        on_started=lambda: print(f"PORT {server.port}", flush=True),
    )


if __name__ == "__main__":
    asyncio.run(_serve())
