"""The HTTP servers of the edge benchmarks, each in its own process, run by
``python -m bench.serve COMMAND [--loop asyncio|uvloop]``:

- ``edge``: the edge as ``boxoffice edge`` builds it (``edge_svc.app.compose``),
  dialling QueueService (and the others) at ``--queue-addr`` with the edge's
  certificate, rate limits in ``REDIS_URL``, development sign-in on and the
  per-IP and per-account limits raised (every benchmark fan comes from one
  address). It prints ``PORT <http port>``.
- ``edge-bare``: the bare baseline in the same server stack (uvicorn with
  httptools, a plain ASGI callable over Starlette's request and response
  classes, the same event loop kind, the garbage collector settled as the
  edge's server settles it once started, ``boxoffice.lifecycle.settle_gc``):
  ``POST /forward`` sends the body to ``--upstream``'s ``/bench.Echo/Echo``
  over mTLS and answers the reply as JSON; ``GET /static`` answers constant
  bytes with the progress document's headers; ``GET /sse`` is a Server-Sent
  Events stream that sends one event at once and one more each time
  ``POST /fire`` sets the shared asyncio.Event.
- ``edge-upstream``: a bare grpc.aio server over mTLS (QueueService's
  certificate): ``/bench.Echo/Echo``, and QueueService's JoinQueue and
  GetQueuePosition as a canned answer for the asserted fan (waiting, the
  ``n``-th) and WatchAdmissionProgress as one snapshot then silence: what
  the edge calls for a join, answered at no cost.

Every process raises its soft open-file limit to the hard one.

Both servers listen on a socket made by the edge's own
``edge_svc.server.bind`` (an IPPROTO_TCP socket, so that asyncio sets
TCP_NODELAY on accepted connections).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import resource
import signal
import urllib.parse
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any

import grpc
import uvicorn
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from bench.common import channel as channel_as
from bench.common import pki
from boxoffice import access
from boxoffice.caller import CUSTOMER_METADATA_KEY
from boxoffice.config import Env, ServerConfig
from boxoffice.lifecycle import run, settle_gc
from boxoffice.runtime import Runtime
from boxoffice.server import server_options
from boxoffice.tls import server_credentials
from edge_svc import app as edge_app
from edge_svc import server as edge_server
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb

LOOPS = ("asyncio", "uvloop")
# Limits no benchmark reaches (every fan comes from 127.0.0.1).
GENEROUS: Mapping[str, object] = {
    "ip_rate_per_second": 1e9,
    "ip_burst": 1_000_000_000,
    "account_rate_per_second": 1e9,
    "account_burst": 1_000_000_000,
    "sse_per_address": 1_000_000_000,
    "sse_per_account": 1_000_000_000,
}
# The bare static answer: a progress document's size and headers.
STATIC_BODY = json.dumps(
    {
        "progress": {
            "eventId": "123456789",
            "admittedThroughScore": "1700000000000123",
            "queueLength": "20010",
            "activeShoppers": "0",
            "admittedTotal": "10",
            "admissionRatePerSecond": 10.0,
            "admissionState": "ADMISSION_STATE_OPEN",
            "observedAt": "2026-01-01T00:00:00.000Z",
            "preQueueJoined": "0",
        }
    },
    separators=(",", ":"),
).encode()
STATIC_HEADERS = {
    "cache-control": "public, max-age=2, stale-while-revalidate=10",
    "etag": '"0123456789abcdef0123456789abcdef"',
    "x-request-id": "0123456789abcdef0123456789abcdef",
}
_SSE_HEADERS = {"cache-control": "private, no-store", "x-accel-buffering": "no"}


def raise_open_files() -> int:
    """The soft open-file limit raised to the hard one; the limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def run_on(loop: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """``main()`` on a new event loop of the kind named."""
    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    else:
        asyncio.run(main())


def _announce(port: int) -> None:
    print(f"PORT {port}", flush=True)


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


# -- the edge -------------------------------------------------------------


async def _edge(queue_addr: str, booking_addr: str, payment_addr: str, settings: Mapping[str, object]) -> None:
    env = Env(dict(os.environ))
    rt = Runtime.from_env(env, database_url="", redis_url=os.environ["REDIS_URL"])
    edge = edge_app.compose(
        rt,
        edge_app.Overrides(
            settings={
                "host": "127.0.0.1",
                "port": 0,
                "queue_addr": queue_addr,
                "booking_addr": booking_addr,
                "payment_addr": payment_addr,
                "dev_sign_in": True,
                "drain_seconds": 0.0,
                **GENEROUS,
                **settings,
            }
        ),
    )
    await run(
        [*rt.infrastructure(), *edge.components], grace_seconds=1.0, on_started=lambda: _announce(edge.server.port)
    )


def serve_edge(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.serve edge")
    parser.add_argument("--loop", choices=LOOPS, default="asyncio")
    parser.add_argument("--queue-addr", required=True)
    parser.add_argument("--booking-addr", default="")
    parser.add_argument("--payment-addr", default="")
    parser.add_argument("--sse-heartbeat-seconds", type=float, default=15.0, help="the edge's SSE heartbeat interval")
    args = parser.parse_args(argv)
    raise_open_files()
    settings = {"sse_heartbeat_seconds": args.sse_heartbeat_seconds}
    run_on(
        args.loop,
        lambda: _edge(
            args.queue_addr, args.booking_addr or args.queue_addr, args.payment_addr or args.queue_addr, settings
        ),
    )


# -- the bare HTTP server -------------------------------------------------


class FanOut:
    """One shared asyncio.Event, set once per update and replaced."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.version = 0

    def fire(self) -> int:
        fired, self.event = self.event, asyncio.Event()
        self.version += 1
        fired.set()
        return self.version


class BareApp:
    """The baseline routes, in the edge's ASGI style."""

    def __init__(self, echo: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes], fan_out: FanOut) -> None:
        self._echo = echo
        self._fan_out = fan_out

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        method, path = scope["method"], scope["path"]
        response: Response
        if method == "POST" and path == "/forward":
            reply = await self._echo(await request.body(), timeout=10.0)
            response = Response(reply, media_type="application/json", headers={"cache-control": "private, no-store"})
        elif method == "GET" and path == "/static":
            response = Response(STATIC_BODY, media_type="application/json", headers=STATIC_HEADERS)
        elif method == "GET" and path == "/sse":
            response = StreamingResponse(self._events(), media_type="text/event-stream", headers=_SSE_HEADERS)
        elif method == "POST" and path == "/fire":
            response = Response(json.dumps({"version": self._fan_out.fire()}).encode(), media_type="application/json")
        else:
            response = Response(b"{}", status_code=404, media_type="application/json")
        await response(scope, receive, send)

    async def _events(self) -> AsyncIterator[str]:
        fan_out = self._fan_out
        yield "retry: 3000\n\n"
        yield f'event: position\ndata: {{"version":{fan_out.version}}}\n\n'
        while True:
            await fan_out.event.wait()
            yield f'event: position\ndata: {{"version":{fan_out.version}}}\n\n'


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


def _identity(data: bytes) -> bytes:
    return data


async def _bare(upstream: str) -> None:
    channel = channel_as(upstream, access.EDGE) if upstream else None
    echo: Any = None
    if channel is not None:
        echo = channel.unary_unary("/bench.Echo/Echo", request_serializer=_identity, response_deserializer=_identity)
    sock = edge_server.bind("127.0.0.1", 0)
    # uvicorn's settings as the edge sets them.
    config = edge_server.uvicorn_config(BareApp(echo, FanOut()), grace_seconds=1)
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the bare server stopped while starting")
        await asyncio.sleep(0.01)
    # The collector settled as the edge's server settles it once started.
    settle_gc()
    _announce(int(sock.getsockname()[1]))
    try:
        await _until_signalled()
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, timeout=3)
        if channel is not None:
            await channel.close()
        sock.close()


def serve_bare(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.serve edge-bare")
    parser.add_argument("--loop", choices=LOOPS, default="asyncio")
    parser.add_argument("--upstream", default="", help="the edge-upstream address /forward calls")
    args = parser.parse_args(argv)
    raise_open_files()
    run_on(args.loop, lambda: _bare(args.upstream))


# -- the canned upstream --------------------------------------------------


class _Canned:
    """QueueService's calls of a join, answered at no cost."""

    def __init__(self) -> None:
        self._joined = 0

    def _position(self, event_id: int, context: grpc.aio.ServicerContext[Any, Any]) -> queue_pb.QueuePosition:
        fan = ""
        for key, value in context.invocation_metadata() or ():
            if key == CUSTOMER_METADATA_KEY:
                fan = urllib.parse.unquote(str(value))
        self._joined += 1
        return queue_pb.QueuePosition(
            event_id=event_id,
            customer_id=fan,
            state=queue_pb.QUEUE_STATE_WAITING,
            ahead=self._joined,
            score=1_000_000 + self._joined,
            admission_state=queue_pb.ADMISSION_STATE_OPEN,
        )

    async def echo(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return request

    async def join(
        self, request: queue_pb.JoinQueueRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> queue_pb.JoinQueueResponse:
        return queue_pb.JoinQueueResponse(position=self._position(request.event_id, context), newly_joined=True)

    async def position(
        self, request: queue_pb.GetQueuePositionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> queue_pb.GetQueuePositionResponse:
        return queue_pb.GetQueuePositionResponse(position=self._position(request.event_id, context))

    async def progress(
        self, request: queue_pb.WatchAdmissionProgressRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[queue_pb.WatchAdmissionProgressResponse]:
        yield queue_pb.WatchAdmissionProgressResponse(
            progress=queue_pb.AdmissionProgress(
                event_id=request.event_id,
                admitted_through_score=1_000_000,
                queue_length=1_000_000,
                admission_rate_per_second=100.0,
                admission_state=queue_pb.ADMISSION_STATE_OPEN,
            )
        )
        await asyncio.Event().wait()


async def _upstream() -> None:
    canned = _Canned()
    server = grpc.aio.server(options=server_options(ServerConfig.from_env(Env({}), default_grpc_port=0)))
    q = queue_pb
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(canned.echo, _identity, _identity)}
            ),
            grpc.method_handlers_generic_handler(
                "boxoffice.queue.v1.QueueService",
                {
                    "JoinQueue": grpc.unary_unary_rpc_method_handler(
                        canned.join, q.JoinQueueRequest.FromString, q.JoinQueueResponse.SerializeToString
                    ),
                    "GetQueuePosition": grpc.unary_unary_rpc_method_handler(
                        canned.position,
                        q.GetQueuePositionRequest.FromString,
                        q.GetQueuePositionResponse.SerializeToString,
                    ),
                    "WatchAdmissionProgress": grpc.unary_stream_rpc_method_handler(
                        canned.progress,
                        q.WatchAdmissionProgressRequest.FromString,
                        q.WatchAdmissionProgressResponse.SerializeToString,
                    ),
                },
            ),
        )
    )
    port = server.add_secure_port("127.0.0.1:0", server_credentials(pki()[access.QUEUE]))
    await server.start()
    gc.freeze()
    _announce(port)
    try:
        await _until_signalled()
    finally:
        await server.stop(0)


def serve_upstream(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.serve edge-upstream")
    parser.add_argument("--loop", choices=LOOPS, default="asyncio")
    args = parser.parse_args(argv)
    raise_open_files()
    run_on(args.loop, _upstream)


# The commands bench/serve.py runs from here (its EDGE_COMMANDS).
COMMANDS: Mapping[str, Callable[[Sequence[str]], None]] = {
    "edge": serve_edge,
    "edge-bare": serve_bare,
    "edge-upstream": serve_upstream,
}
