"""Helpers for the leader-election tests: a timeline of terms, candidates in
this process and in child processes, a TCP proxy that can black-hole a
connection, and a stand-in for the Kubernetes Lease endpoints.

Run as ``python -m tests.leader.support DATABASE_URL NAME IDENTITY
LEASE RENEW RETRY`` it is one Postgres-backend candidate that prints a JSON
line when it starts and stops leading.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from boxoffice.config import Env
from boxoffice.leader import Leadership, create_leadership
from boxoffice.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]


def runtime(database_url: str, environ: Mapping[str, str]) -> Runtime:
    """A Runtime that only leader election uses (nothing connects until asked)."""
    env = Env({"BOXOFFICE_GRPC_PORT": "0", **environ})
    return Runtime.from_env(env, database_url=database_url, redis_url="redis://127.0.0.1:1/0")


def timing_env(lease: float, renew: float, retry: float) -> dict[str, str]:
    return {
        "BOXOFFICE_LEADER_LEASE_SECONDS": str(lease),
        "BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS": str(renew),
        "BOXOFFICE_LEADER_RETRY_SECONDS": str(retry),
    }


async def wait_until(predicate: Callable[[], bool], within: float, what: str) -> float:
    """Poll until ``predicate`` holds; the seconds it took. Fails after ``within`` seconds."""
    began = time.monotonic()
    while not predicate():
        if time.monotonic() - began > within:
            raise AssertionError(f"not within {within:.1f} s: {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - began


@dataclass
class Term:
    """One candidate's stint of running the leader's work."""

    who: str
    epoch: int
    started: float
    stopped: float | None = None


@dataclass
class Timeline:
    """Every term of every in-process candidate, on one monotonic clock."""

    terms: list[Term] = field(default_factory=list)

    def lead_for(self, who: str, *, fail_after: float | None = None) -> Callable[[int], Awaitable[None]]:
        async def lead(epoch: int) -> None:
            term = Term(who, epoch, time.monotonic())
            self.terms.append(term)
            try:
                if fail_after is not None:
                    await asyncio.sleep(fail_after)
                    raise RuntimeError(f"{who}'s work failed")
                await asyncio.Event().wait()
            finally:
                term.stopped = time.monotonic()

        return lead

    def running(self) -> list[Term]:
        return [t for t in self.terms if t.stopped is None]

    def leader(self) -> str | None:
        running = self.running()
        return running[0].who if len(running) == 1 else None

    def last_of(self, who: str) -> Term | None:
        mine = [t for t in self.terms if t.who == who]
        return mine[-1] if mine else None

    def overlaps(self) -> list[tuple[Term, Term]]:
        """Pairs of terms of different candidates that ran at the same time."""
        found = []
        for a, b in itertools.combinations(self.terms, 2):
            if a.who == b.who:
                continue
            a_end = a.stopped if a.stopped is not None else float("inf")
            b_end = b.stopped if b.stopped is not None else float("inf")
            if a.started < b_end and b.started < a_end:
                found.append((a, b))
        return found


class Candidates:
    """In-process candidates, each its own Runtime and ``run`` task."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.runtimes: dict[str, Runtime] = {}

    def start(
        self, who: str, database_url: str, environ: Mapping[str, str], *, name: str, fail_after: float | None = None
    ) -> Leadership:
        rt = runtime(database_url, {"POD_NAME": who, **environ})
        leadership = create_leadership(rt, name)
        self.runtimes[who] = rt
        self.tasks[who] = asyncio.create_task(leadership.run(self.timeline.lead_for(who, fail_after=fail_after)))
        return leadership

    async def stop(self, who: str) -> None:
        task = self.tasks.pop(who)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def stop_all(self) -> None:
        for who in list(self.tasks):
            await self.stop(who)


class ChildCandidate:
    """A Postgres-backend candidate in its own process (so that it can be
    SIGKILLed or SIGSTOPped); its terms arrive as JSON lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(
        cls, *, database_url: str, name: str, identity: str, lease: float, renew: float, retry: float
    ) -> ChildCandidate:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.leader.support",
            database_url,
            name,
            identity,
            str(lease),
            str(renew),
            str(retry),
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.events.append({**json.loads(line), "at": time.monotonic()})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def event(self, kind: str) -> dict[str, Any] | None:
        found = [e for e in self.events if e["event"] == kind]
        return found[-1] if found else None

    def leading(self) -> bool:
        return bool(self.events) and self.events[-1]["event"] == "leading"

    async def close(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, 9)
                os.kill(self.proc.pid, 18)  # SIGCONT, in case it was stopped
        await self.proc.wait()
        await self._reader


class BlackholeProxy:
    """A TCP proxy to Postgres (TCP or Unix socket) that can stop passing
    bytes while keeping every connection open: a network partition as both
    ends see it."""

    def __init__(self, database_url: str) -> None:
        params = conninfo_to_dict(database_url)
        self._target_host = str(params.get("host") or "127.0.0.1")
        self._target_port = int(str(params.get("port") or 5432))
        self._database_url = database_url
        self._server: asyncio.Server | None = None
        self._open = asyncio.Event()
        self._open.set()
        self._pumps: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return make_conninfo(self._database_url, host="127.0.0.1", port=str(self.port), sslmode="disable")

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def blackhole(self) -> None:
        self._open.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._target_host.startswith("/"):
            path = f"{self._target_host}/.s.PGSQL.{self._target_port}"
            up_reader, up_writer = await asyncio.open_unix_connection(path)
        else:
            up_reader, up_writer = await asyncio.open_connection(self._target_host, self._target_port)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink))
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await source.read(65536)
                if not data:
                    break
                await self._open.wait()  # black-holed: held here, never delivered
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pumps):
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)


@dataclass
class _Frontend:
    runner: web.AppRunner
    url: str
    open: asyncio.Event


class LeaseStandIn:
    """The Lease endpoints of a Kubernetes API server, in memory.

    Like the real one it keeps a resourceVersion per object, answers 409
    Conflict to a PUT that carries a stale one (and to a POST of an existing
    Lease), and 404 with a Status body for a missing one. Each candidate can
    get its own front end (URL), which ``stall`` makes hang: a partition
    between that candidate and the API server. ``hold_reads`` makes GETs wait
    until that many are waiting (a forced race); ``enforce_versions=False``
    turns optimistic concurrency off (for control tests).
    """

    PREFIX = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def __init__(self, *, enforce_versions: bool = True) -> None:
        self.enforce_versions = enforce_versions
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.conflicts = 0
        self.writes: list[dict[str, Any]] = []
        self._version = itertools.count(100)
        self._frontends: list[_Frontend] = []
        self._closing = asyncio.Event()
        self._held: list[asyncio.Future[None]] = []
        self._hold_reads = 0

    def hold_reads(self, count: int) -> None:
        self._hold_reads = count

    async def frontend(self) -> str:
        gate = asyncio.Event()
        gate.set()
        app = web.Application(middlewares=[self._gate(gate)])
        app.router.add_get(self.PREFIX + "/{name}", self._get)
        app.router.add_put(self.PREFIX + "/{name}", self._put)
        app.router.add_post(self.PREFIX, self._post)
        runner = web.AppRunner(app, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        frontend = _Frontend(runner, f"http://127.0.0.1:{port}", gate)
        self._frontends.append(frontend)
        return frontend.url

    def stall(self, url: str) -> None:
        for frontend in self._frontends:
            if frontend.url == url:
                frontend.open.clear()

    def _gate(self, gate: asyncio.Event) -> Any:
        @web.middleware
        async def middleware(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            if not gate.is_set():
                closing = asyncio.ensure_future(self._closing.wait())
                opened = asyncio.ensure_future(gate.wait())
                await asyncio.wait((closing, opened), return_when=asyncio.FIRST_COMPLETED)
                closing.cancel()
                opened.cancel()
                if self._closing.is_set():
                    return self._status(503, "ServiceUnavailable", "shutting down")
            return await handler(request)

        return middleware

    async def close(self) -> None:
        self._closing.set()
        for future in self._held:
            if not future.done():
                future.set_result(None)
        for frontend in self._frontends:
            await frontend.runner.cleanup()

    def holder(self, namespace: str, name: str) -> str | None:
        lease = self.leases.get((namespace, name))
        return None if lease is None else lease.get("spec", {}).get("holderIdentity")

    def transitions(self, namespace: str, name: str) -> int | None:
        lease = self.leases.get((namespace, name))
        return None if lease is None else lease.get("spec", {}).get("leaseTransitions")

    @staticmethod
    def _status(code: int, reason: str, message: str) -> web.Response:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason}
        return web.json_response({**body, "code": code}, status=code)

    async def _get(self, request: web.Request) -> web.Response:
        if self._hold_reads:
            future = asyncio.get_running_loop().create_future()
            self._held.append(future)
            if len([f for f in self._held if not f.done()]) >= self._hold_reads:
                self._hold_reads = 0
                for waiting in self._held:
                    if not waiting.done():
                        waiting.set_result(None)
            await future
        key = (request.match_info["namespace"], request.match_info["name"])
        lease = self.leases.get(key)
        if lease is None:
            return self._status(404, "NotFound", f'leases.coordination.k8s.io "{key[1]}" not found')
        return web.json_response(lease)

    async def _post(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        body = await request.json()
        name = body.get("metadata", {}).get("name", "")
        if (namespace, name) in self.leases:
            self.conflicts += 1
            return self._status(409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists')
        return web.json_response(self._store(namespace, name, body), status=201)

    async def _put(self, request: web.Request) -> web.Response:
        key = (request.match_info["namespace"], request.match_info["name"])
        body = await request.json()
        current = self.leases.get(key)
        if current is None:
            return self._status(404, "NotFound", f'leases.coordination.k8s.io "{key[1]}" not found')
        sent = body.get("metadata", {}).get("resourceVersion")
        if self.enforce_versions and sent and sent != current["metadata"]["resourceVersion"]:
            self.conflicts += 1
            return self._status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on leases.coordination.k8s.io "{key[1]}": '
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        return web.json_response(self._store(*key, body))

    def _store(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        metadata = dict(body.get("metadata") or {})
        metadata.update(namespace=namespace, name=name, resourceVersion=str(next(self._version)))
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": body["spec"]}
        self.leases[(namespace, name)] = lease
        self.writes.append(lease)
        return lease


@contextlib.asynccontextmanager
async def lease_stand_in(*, enforce_versions: bool = True) -> AsyncIterator[LeaseStandIn]:
    stand_in = LeaseStandIn(enforce_versions=enforce_versions)
    try:
        yield stand_in
    finally:
        await stand_in.close()


def _emit(event: str, epoch: int) -> None:
    print(json.dumps({"event": event, "epoch": epoch}), flush=True)


async def _child(database_url: str, name: str, identity: str, lease: str, renew: str, retry: str) -> None:
    environ = {"POD_NAME": identity, **timing_env(float(lease), float(renew), float(retry))}
    leadership = create_leadership(runtime(database_url, environ), name)

    async def lead(epoch: int) -> None:
        _emit("leading", epoch)
        try:
            await asyncio.Event().wait()
        finally:
            _emit("stopped", epoch)

    await leadership.run(lead)


if __name__ == "__main__":
    asyncio.run(_child(*sys.argv[1:7]))
