"""The PaymentService server role in its own process, for benchmarks.

Run: ``DATABASE_URL=... BOXOFFICE_BOOKING_ADDR=... python -m bench.payment_server``
- serves on a free loopback port (prints ``PORT <n>`` once listening)
against an already migrated database, until SIGTERM. The sandbox provider
answers at once and keeps its webhooks (manual mode) unless the environment
says otherwise, so that a benchmark measures the confirm path alone.
"""

from __future__ import annotations

import asyncio
import os

from boxoffice.config import Env
from boxoffice.lifecycle import run
from boxoffice.runtime import Runtime
from boxoffice.server import GrpcServer
from payment_svc import app


async def _serve() -> None:
    env = Env(
        {
            "BOXOFFICE_GRPC_PORT": "0",
            "BOXOFFICE_SANDBOX_DELAY_SECONDS": "0",
            "BOXOFFICE_SANDBOX_WEBHOOK_MODE": "manual",
            "BOXOFFICE_RECONCILE_INTERVAL_SECONDS": "300",
            **os.environ,
        }
    )
    rt = Runtime.from_env(
        env, database_url=os.environ["DATABASE_URL"], redis_url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/12")
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
