"""What the edge benchmarks share: their server processes (bench/edge_serve.py
through ``python -m bench.serve``), fans signed in through the edge, and
closed-loop HTTP load from client processes of their own
(bench/edge_load.py), with the server's CPU time over the measured window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bench.common import ServerProcess, cpu_seconds, server_process

# QueueService's join limits off: every fan comes from one address.
QUEUE_ENV = {"BOXOFFICE_QUEUE_JOIN_LIMIT_PER_ACCOUNT": "0", "BOXOFFICE_QUEUE_JOIN_LIMIT_PER_CLIENT": "0"}


def port_of(server: ServerProcess) -> int:
    return int(server.address.rsplit(":", 1)[1])


@contextlib.contextmanager
def upstream_server() -> Iterator[ServerProcess]:
    """The canned QueueService and echo over mTLS (``edge-upstream``)."""
    with server_process(["-m", "bench.serve", "edge-upstream"], role="queue") as server:
        yield server


@contextlib.contextmanager
def bare_server(loop: str, upstream: str = "") -> Iterator[ServerProcess]:
    """The bare HTTP server (``edge-bare``) on ``loop``."""
    argv = ["-m", "bench.serve", "edge-bare", "--loop", loop, *(["--upstream", upstream] if upstream else [])]
    with server_process(argv, role="edge") as server:
        yield server


@contextlib.contextmanager
def edge_server(loop: str, queue_addr: str, redis_url: str, *extra: str) -> Iterator[ServerProcess]:
    """The edge (``edge``) on ``loop``, calling QueueService at ``queue_addr``."""
    argv = ["-m", "bench.serve", "edge", "--loop", loop, "--queue-addr", queue_addr, *extra]
    with server_process(argv, env={"REDIS_URL": redis_url}, role="edge") as server:
        yield server


async def _child(*argv: str) -> dict[str, object]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.edge_load", *argv, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"bench.edge_load {' '.join(argv)} exited {proc.returncode}")
    result: dict[str, object] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def sign_in(port: int, *, first: int, count: int, out: str, connections: int = 32) -> float:
    """Fans fan-<first> .. signed in through ``POST /v1/session``, their
    cookies in ``out``; sign-ins per second."""
    result = await _child(
        "signin", "--port", str(port), "--first", str(first), "--count", str(count), "--out", out,
        "--connections", str(connections),
    )  # fmt: skip
    if result["signed"] != count:
        raise RuntimeError(f"sign-in: {result}")
    return count / float(str(result["seconds"]))


@dataclass(frozen=True)
class Shape:
    """A closed loop's shape: connections, then warm-up and measured seconds."""

    connections: int
    seconds: float
    warmup: float = 1.0


@dataclass(frozen=True)
class Load:
    """What a closed loop measured (all its client processes together)."""

    ok: int
    failed: int
    seconds: float
    p50_ms: float
    p99_ms: float
    server_cpu_s: float
    client_cpu_s: float
    statuses: dict[str, int]
    cookies_reused: int

    @property
    def rps(self) -> float:
        return self.ok / self.seconds

    @property
    def server_us(self) -> float:
        """Server CPU per answered request, in microseconds."""
        return self.server_cpu_s / max(1, self.ok) * 1e6


async def load(
    server: ServerProcess,
    shape: Shape,
    *,
    method: str,
    path: str,
    clients: int = 1,
    cookies: str = "",
    cookie_offset: int = 0,
    cookie_count: int = 0,
    paths: str = "",
) -> Load:
    """``clients`` processes with ``shape.connections`` between them,
    started together; each takes its own share of the cookie file's lines
    ``cookie_offset`` .. ``+cookie_count``; ``paths``: a file of paths
    asked in turn instead of ``path``."""
    connections, seconds, warmup = shape.connections, shape.seconds, shape.warmup
    start = time.monotonic() + 1.0  # time for the client processes to start
    share = cookie_count // clients if cookie_count else 0
    runs = []
    for i in range(clients):
        argv = [
            "load", "--port", str(port_of(server)), "--method", method, "--path", path,
            "--connections", str(connections // clients + (1 if i < connections % clients else 0)),
            "--start", f"{start:.6f}", "--warmup", str(warmup), "--seconds", str(seconds),
        ]  # fmt: skip
        if paths:
            argv += ["--paths", paths]
        if cookies:
            argv += ["--cookies", cookies, "--cookie-offset", str(cookie_offset + i * share)]
            argv += ["--cookie-count", str(share)]
        runs.append(asyncio.create_task(_child(*argv)))
    await asyncio.sleep(max(0.0, start + warmup - time.monotonic()))
    cpu_before = cpu_seconds(server.pid)
    await asyncio.sleep(max(0.0, start + warmup + seconds - time.monotonic()))
    cpu_used = cpu_seconds(server.pid) - cpu_before
    results = await asyncio.gather(*runs)
    statuses: dict[str, int] = {}
    for result in results:
        for code, n in dict(result["statuses"]).items():  # type: ignore[call-overload]
            statuses[code] = statuses.get(code, 0) + int(n)

    def number(result: dict[str, object], key: str) -> float:
        return float(str(result[key]))

    return Load(
        ok=sum(int(number(r, "ok")) for r in results),
        failed=sum(int(number(r, "failed")) for r in results),
        seconds=seconds,
        p50_ms=sorted(number(r, "p50_ms") for r in results)[len(results) // 2],
        p99_ms=max(number(r, "p99_ms") for r in results),
        server_cpu_s=cpu_used,
        client_cpu_s=sum(number(r, "client_cpu_s") for r in results),
        statuses=statuses,
        cookies_reused=sum(int(number(r, "cookies_reused")) for r in results),
    )


def per_round(values: Sequence[float], baselines: Sequence[float]) -> tuple[float, ...]:
    """The ratio of each round's figure to its baseline."""
    return tuple(v / b if b else float("nan") for v, b in zip(values, baselines, strict=True))


def ratios(values: Sequence[float], baselines: Sequence[float]) -> str:
    return " ".join(f"{r:.2f}" for r in per_round(values, baselines))


@dataclass(frozen=True)
class Figure:
    """One line of an edge benchmark's table: a figure, its baseline measured
    in the same run, and the goal on their ratio (``op`` ">=" or "<=")."""

    name: str
    value: float
    baseline: float
    unit: str
    op: str = ""
    goal: float = 0.0
    note: str = ""
    # The ratio of each interleaved round; when given, the ratio is their
    # median (steadier on a shared machine than a ratio of medians).
    rounds: tuple[float, ...] = ()

    @property
    def ratio(self) -> float:
        if self.rounds:
            return statistics.median(self.rounds)
        return self.value / self.baseline if self.baseline else float("nan")

    @property
    def met(self) -> str:
        if not self.op:
            return ""
        ok = self.ratio >= self.goal if self.op == ">=" else self.ratio <= self.goal
        return "yes" if ok else "NO"


def _fmt(value: float, unit: str) -> str:
    if unit in ("/s", "us", "B", "KB", ""):
        return f"{value:,.0f} {unit}".strip() if value >= 100 or unit == "" else f"{value:,.1f} {unit}".strip()
    return f"{value:,.1f} {unit}"


def table(title: str, figures: Sequence[Figure]) -> None:
    """The figures as a markdown table (ready for the README)."""
    print(f"\n{title}\n")
    print("| measure | figure | baseline | ratio | goal | met? | notes |")
    # Figures are medians over rounds; a ratio with rounds is the median of
    # the rounds' ratios.
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for f in figures:
        goal = f"{f.op} {f.goal:g}" if f.op else ""
        ratio = f"{f.ratio:.2f}" if f.baseline or f.rounds else ""
        base = _fmt(f.baseline, f.unit) if f.baseline else ""
        print(f"| {f.name} | {_fmt(f.value, f.unit)} | {base} | {ratio} | {goal} | {f.met} | {f.note} |")
    sys.stdout.flush()
