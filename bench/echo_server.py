"""A bare grpc.aio server: the baseline every benchmark is measured against.

Unary ``/bench.Echo/Echo`` returns its request; ``/bench.Echo/Watch`` is a
server stream that sends one message, then one more on every
``/bench.Echo/Tick`` (a bare in-memory fan-out), until a Tick of ``b"end"``.

Run: ``python -m bench.echo_server [--tls]`` - prints ``PORT <n>`` once
listening. ``--tls``: mutual TLS with the certificate the BOXOFFICE_TLS_*
settings name (``bench.common.tls_env``), the mesh's transport, so that a
service's CPU per call can be set against an echo's over the same transport.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from boxoffice import lifecycle
from boxoffice.config import Env, ServerConfig, TlsConfig
from boxoffice.server import server_options
from boxoffice.tls import CertFiles, server_credentials

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


def _credentials() -> grpc.ServerCredentials:
    tls = TlsConfig.from_env(Env(os.environ))
    if tls.ca_file is None or tls.cert_file is None or tls.key_file is None:
        raise SystemExit("--tls needs BOXOFFICE_TLS_CA_FILE, BOXOFFICE_TLS_CERT_FILE and BOXOFFICE_TLS_KEY_FILE")
    return server_credentials(CertFiles(Path(tls.ca_file), Path(tls.cert_file), Path(tls.key_file)))


async def _serve(port: int, freeze: bool, tls: bool) -> None:
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
    address = f"127.0.0.1:{port}"
    bound = server.add_secure_port(address, _credentials()) if tls else server.add_insecure_port(address)
    await server.start()
    if freeze:
        lifecycle.settle_gc()
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
    parser.add_argument(
        "--settle-gc", action="store_true", help="settle the garbage collector once started, as the mesh's servers do"
    )
    parser.add_argument("--tls", action="store_true", help="mutual TLS as the mesh's servers (BOXOFFICE_TLS_* files)")
    args = parser.parse_args()
    asyncio.run(_serve(args.port, args.settle_gc, args.tls))


if __name__ == "__main__":
    main()
