"""A bare grpc.aio server: the baseline every benchmark is measured against.

Unary ``/bench.Echo/Echo`` returns its request; ``/bench.Echo/Watch`` is a
server stream that sends one message, then one more on every
``/bench.Echo/Tick`` (a bare in-memory fan-out), until a Tick of ``b"end"``.

Run: ``python -m bench.echo_server`` - prints ``PORT <n>`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
from collections.abc import AsyncIterator

import grpc

from boxoffice.config import Env, ServerConfig
from boxoffice.server import server_options

SERVICE = "bench.Echo"


def _identity(data: bytes) -> bytes:
    return data


class _Echo:
    def __init__(self) -> None:
        self._streams: set[asyncio.Queue[bytes]] = set()

    async def echo(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return request

    async def watch(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._streams.add(queue)
        try:
            yield b"hello"
            while True:
                message = await queue.get()
                if message == b"end":
                    return
                yield message
        finally:
            self._streams.discard(queue)

    async def tick(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        for queue in self._streams:
            queue.put_nowait(request)
        return str(len(self._streams)).encode()


async def _serve(port: int, freeze: bool) -> None:
    echo = _Echo()
    config = ServerConfig.from_env(Env({}), default_grpc_port=port)
    server = grpc.aio.server(options=server_options(config))
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Echo": grpc.unary_unary_rpc_method_handler(echo.echo, _identity, _identity),
            "Watch": grpc.unary_stream_rpc_method_handler(echo.watch, _identity, _identity),
            "Tick": grpc.unary_unary_rpc_method_handler(echo.tick, _identity, _identity),
        },
    )
    server.add_generic_rpc_handlers((handler,))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    if freeze:
        gc.freeze()
    print(f"PORT {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    await server.stop(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() after start, as a tuned server would")
    args = parser.parse_args()
    asyncio.run(_serve(args.port, args.gc_freeze))


if __name__ == "__main__":
    main()
