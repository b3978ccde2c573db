"""Sanity check of the harness: the bare echo server's unary req/s.

Run: ``python -m bench.echo_bench``
"""

from __future__ import annotations

import asyncio

import grpc

from bench.common import Row, closed_loop, echo_call, echo_server, report


async def _main() -> None:
    with echo_server() as server:
        async with grpc.aio.insecure_channel(server.address) as channel:
            echo = echo_call(channel)
            figures = await closed_loop(lambda n: echo(b"x" * 32), concurrency=64, seconds=5)
    report(
        "bare grpc.aio echo, one server process, one Python client process",
        [
            Row("echo req/s", figures.rps, "/s"),
            Row("echo p50 latency", figures.p50_ms, "ms"),
            Row("echo p99 latency", figures.p99_ms, "ms"),
        ],
    )


if __name__ == "__main__":
    asyncio.run(_main())
