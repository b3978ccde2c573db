"""Any role of the mesh in its own process, for benchmarks: the components
``boxoffice COMMAND`` runs (built by the service's ``app``), against an
already migrated database, on a free loopback port.

Run: ``DATABASE_URL=... REDIS_URL=... python -m bench.serve COMMAND`` where
COMMAND is one of the ``boxoffice`` commands of a role (``queue-svc``,
``booking-svc``, ``payment-svc``, ``admitter``, ``relay``, ...). It prints
``PORT <n>`` once listening (a background role serves gRPC health only)
and runs until SIGTERM. ``--gc-freeze`` calls ``gc.freeze()`` once started,
as the bare baseline server can; ``--loop asyncio|uvloop`` picks the event
loop (default: what ``BOXOFFICE_EVENT_LOOP`` says, as ``boxoffice`` does).

The edge benchmarks' servers are commands of their own (bench/edge_serve.py):
``edge`` (printing its HTTP port), ``edge-bare`` and ``edge-upstream``; their
options follow the command (see that module).
"""

from __future__ import annotations

import argparse
import gc
import os

from boxoffice import loops
from boxoffice.config import Env
from boxoffice.lifecycle import run
from boxoffice.runtime import Runtime, ServiceModule
from boxoffice.server import GrpcServer
from boxoffice_cli.main import commands, service_modules

# The edge benchmarks' servers (bench/edge_serve.py, imported only for them).
EDGE_COMMANDS = ("edge", "edge-bare", "edge-upstream")


async def _serve(module: ServiceModule, role: str, freeze: bool) -> None:
    env = Env({"BOXOFFICE_GRPC_PORT": "0", **os.environ})
    rt = Runtime.from_env(env, database_url=os.environ["DATABASE_URL"], redis_url=os.environ.get("REDIS_URL", ""))
    components = await module.build(rt, role)
    server = next((c for c in components if isinstance(c, GrpcServer)), None)
    if server is None:
        server = rt.grpc_server(module.COMPONENT, [])
        components.append(server)

    def started() -> None:
        if freeze:
            gc.freeze()
        print(f"PORT {server.port}", flush=True)

    await run([*rt.infrastructure(), *components], grace_seconds=1.0, on_started=started)


def main() -> None:
    table = commands(service_modules())
    parser = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__)
    parser.add_argument(
        "command", choices=sorted({*table, *EDGE_COMMANDS}), help="the boxoffice command of the role to run"
    )
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() once started")
    parser.add_argument("--loop", choices=loops.LOOPS, help="the event loop (default: BOXOFFICE_EVENT_LOOP's)")
    args, rest = parser.parse_known_args()
    if args.command in EDGE_COMMANDS:
        from bench import edge_serve

        edge_serve.COMMANDS[args.command](rest)
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    module, role = table[args.command]
    loops.run(_serve(module, role, args.gc_freeze), args.loop or loops.loop_name(Env(os.environ)))


if __name__ == "__main__":
    main()
