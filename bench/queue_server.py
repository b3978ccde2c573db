"""The QueueService server role in its own process, for benchmarks: the
same components as ``boxoffice queue-svc`` (app.build(rt, "server")).

Run: ``DATABASE_URL=... REDIS_URL=... python -m bench.queue_server`` -
serves on a free loopback port (prints ``PORT <n>`` once listening) against
an already migrated database, until SIGTERM. ``--gc-freeze`` calls
``gc.freeze()`` once started, as the bare baseline server can.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os

from boxoffice.config import Env
from boxoffice.lifecycle import run
from boxoffice.runtime import Runtime
from boxoffice.server import GrpcServer
from queue_svc import app


async def _serve(freeze: bool) -> None:
    env = Env({"BOXOFFICE_GRPC_PORT": "0", **os.environ})
    rt = Runtime.from_env(env, database_url=os.environ["DATABASE_URL"], redis_url=os.environ["REDIS_URL"])
    components = await app.build(rt, "server")
    server = next(c for c in components if isinstance(c, GrpcServer))

    def started() -> None:
        if freeze:
            gc.freeze()
        print(f"PORT {server.port}", flush=True)

    await run([*rt.infrastructure(), *components], grace_seconds=1.0, on_started=started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() once started")
    args = parser.parse_args()
    asyncio.run(_serve(args.gc_freeze))


if __name__ == "__main__":
    main()
