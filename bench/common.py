"""Tools every benchmark shares: start a server process, drive it with a
closed loop of concurrent calls, read a process's memory, print a table.

Benchmarks print figures next to a baseline measured in the same run: on a
shared 2-core machine only ratios within one run mean anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

import grpc


@dataclass(frozen=True)
class ServerProcess:
    """A server running in a child process."""

    address: str
    pid: int


@contextlib.contextmanager
def server_process(
    argv: Sequence[str], *, env: dict[str, str] | None = None, ready_prefix: str = "PORT "
) -> Iterator[ServerProcess]:
    """Run ``argv`` (a Python module invocation) until it prints
    ``<ready_prefix><port>``; stop it with SIGTERM afterwards."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert proc.stdout is not None
        port = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith(ready_prefix):
                port = int(line[len(ready_prefix) :].strip())
                break
        if port is None:
            raise RuntimeError(f"{' '.join(argv)} did not report its port")
        yield ServerProcess(f"127.0.0.1:{port}", proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def echo_server(*, gc_freeze: bool = False) -> Iterator[ServerProcess]:
    """The bare grpc.aio baseline server (bench/echo_server.py)."""
    argv = ["-m", "bench.echo_server", *(["--gc-freeze"] if gc_freeze else [])]
    with server_process(argv) as server:
        yield server


def echo_call(channel: grpc.aio.Channel) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    return channel.unary_unary("/bench.Echo/Echo", request_serializer=_identity, response_deserializer=_identity)


def _identity(data: bytes) -> bytes:
    return data


@dataclass(frozen=True)
class LoadFigures:
    """What a closed loop measured."""

    calls: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0


async def closed_loop(
    call: Callable[[int], Awaitable[object]], *, concurrency: int, seconds: float, warmup_seconds: float = 1.0
) -> LoadFigures:
    """``concurrency`` workers call ``call(n)`` back to back (n counts up,
    unique across workers) for ``warmup_seconds`` then ``seconds``; only the
    measured part counts. Errors are counted, not raised."""
    counter = 0
    latencies: list[float] = []
    errors = 0
    measuring = False
    stop_at = time.monotonic() + warmup_seconds + seconds

    async def worker() -> None:
        nonlocal counter, errors
        while time.monotonic() < stop_at:
            counter += 1
            began = time.perf_counter()
            try:
                await call(counter)
            except Exception:
                if measuring:
                    errors += 1
                continue
            if measuring:
                latencies.append(time.perf_counter() - began)

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    await asyncio.sleep(warmup_seconds)
    measuring = True
    began = time.monotonic()
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - began
    latencies.sort()

    def pct(p: float) -> float:
        if not latencies:
            return 0.0
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return LoadFigures(len(latencies), errors, elapsed, pct(0.50), pct(0.99))


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux /proc)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


@dataclass(frozen=True)
class Row:
    """One line of a benchmark report."""

    name: str
    value: float
    unit: str
    baseline: float | None = None
    goal: str = ""
    # "higher" when value/baseline should be high, "lower" when low.
    better: str = "higher"

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0):
            return None
        assert self.baseline is not None
        return self.value / self.baseline


def report(title: str, rows: Sequence[Row]) -> None:
    """Print a table of figures with their baselines and ratios."""
    print(f"\n{title}")
    header = f"  {'measure':<52} {'value':>14} {'baseline':>14} {'ratio':>7}  goal"
    print(header)
    print("  " + "-" * (len(header) - 2))
    for row in rows:
        base = "" if row.baseline is None else f"{row.baseline:,.1f}"
        ratio = "" if row.ratio is None else f"{row.ratio:.2f}"
        print(f"  {row.name:<52} {row.value:>10,.1f} {row.unit:<3} {base:>14} {ratio:>7}  {row.goal}")
    sys.stdout.flush()
