"""Tools every benchmark shares: start a server process, drive it with a
closed loop of concurrent calls, read a process's memory, print a table.

Benchmarks print figures next to a baseline measured in the same run: on a
shared 2-core machine only ratios within one run mean anything. Servers and
clients speak mTLS as the mesh does (a benchmark PKI made once per run, in
a temporary folder): ``tls_env(role)`` for a server process, ``channel`` for
a client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from boxoffice import access
from boxoffice.tls import CertFiles, local_pki

_TRUST_DOMAIN = "boxoffice.local"
_pki: dict[str, CertFiles] = {}


def pki() -> dict[str, CertFiles]:
    """The run's CA and a certificate per role (made on first use, in the
    folder ``BOXOFFICE_BENCH_TLS_DIR`` names, which the benchmark's child
    processes inherit)."""
    if not _pki:
        named = os.environ.get("BOXOFFICE_BENCH_TLS_DIR")
        directory = Path(named) if named else Path(tempfile.mkdtemp(prefix="boxoffice-bench-tls-"))
        os.environ["BOXOFFICE_BENCH_TLS_DIR"] = str(directory)
        _pki.update(
            local_pki(directory, {role: access.spiffe_id(_TRUST_DOMAIN, "bench", role) for role in access.ROLES})
        )
    return _pki


def tls_env(role: str, *, tls: bool = True) -> dict[str, str]:
    """The settings of a server process serving as ``role``; ``tls=False``:
    TLS off, callers named by a sidecar's XFCC header (see
    :func:`xfcc_metadata`), the cheapest identity a server can have, to
    measure what mTLS costs against it."""
    if not tls:
        return {"BOXOFFICE_TLS": "off", "BOXOFFICE_TLS_MESH_IDENTITY": "xfcc", "BOXOFFICE_TRUST_DOMAIN": _TRUST_DOMAIN}
    files = pki()[role]
    return {
        "BOXOFFICE_TLS": "on",
        "BOXOFFICE_TLS_CA_FILE": str(files.ca),
        "BOXOFFICE_TLS_CERT_FILE": str(files.cert),
        "BOXOFFICE_TLS_KEY_FILE": str(files.key),
        "BOXOFFICE_TRUST_DOMAIN": _TRUST_DOMAIN,
    }


def xfcc_metadata(role: str) -> tuple[tuple[str, str], ...]:
    """What a sidecar would forward for a peer of ``role`` (for a server
    with ``tls_env(..., tls=False)``)."""
    uri = access.spiffe_id(_TRUST_DOMAIN, "bench", role)
    return (("x-forwarded-client-cert", f"By=spiffe://{_TRUST_DOMAIN}/ns/bench/sa/server;URI={uri}"),)


def channel(
    address: str, role: str = access.EDGE, *, tls: bool = True, own_connection: bool = False
) -> grpc.aio.Channel:
    """A client channel to a benchmark server as ``role`` (plaintext with
    ``tls=False``). ``own_connection``: a TCP connection of its own, not
    one shared with the process's other channels to the same address (so
    that several channels reach several processes listening on one port)."""
    options = [("grpc.use_local_subchannel_pool", 1)] if own_connection else []
    if not tls:
        return grpc.aio.insecure_channel(address, options=options)
    files = pki()[role]
    credentials = grpc.ssl_channel_credentials(
        root_certificates=files.ca.read_bytes(),
        private_key=files.key.read_bytes(),
        certificate_chain=files.cert.read_bytes(),
    )
    return grpc.aio.secure_channel(address, credentials, options=options)


# The role a benchmark's call takes when the table allows several.
_PREFERRED = (access.EDGE, access.PAYMENT, access.OPERATOR, *access.ROLES)


class MeshStub:
    """A generated stub whose every method goes as a role the authorization
    table allows it (the edge first, then payment, then operator), over one
    channel per role; ``async with`` closes them."""

    def __init__(self, address: str, factory: Callable[[grpc.aio.Channel], Any]) -> None:
        self._address = address
        self._factory = factory
        package = factory.__module__.removeprefix("gen.").rsplit(".", 1)[0]
        self._service = f"{package}.{factory.__name__.removesuffix('Stub')}"
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, Any] = {}

    def __getattr__(self, method: str) -> Any:
        allowed = access.POLICY.get(f"/{self._service}/{method}", frozenset())
        role = next((r for r in _PREFERRED if r in allowed), access.EDGE)
        if role not in self._stubs:
            self._channels[role] = channel(self._address, role)
            self._stubs[role] = self._factory(self._channels[role])
        return getattr(self._stubs[role], method)

    async def __aenter__(self) -> MeshStub:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for chan in self._channels.values():
            await chan.close()


@dataclass(frozen=True)
class ServerProcess:
    """A server running in a child process."""

    address: str
    pid: int


@contextlib.contextmanager
def server_process(
    argv: Sequence[str], *, env: dict[str, str] | None = None, ready_prefix: str = "PORT ", role: str | None = None
) -> Iterator[ServerProcess]:
    """Run ``argv`` (a Python module invocation) until it prints
    ``<ready_prefix><port>``; stop it with SIGTERM afterwards. ``role``: the
    process serves (and dials) with that role's certificate, unless ``env``
    says otherwise."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=None if os.environ.get("BOXOFFICE_BENCH_SERVER_STDERR") else subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(tls_env(role) if role is not None else {}), **(env or {})},
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
def echo_server(*, settle_gc: bool = True, tls_role: str | None = None) -> Iterator[ServerProcess]:
    """The bare grpc.aio baseline server (bench/echo_server.py), its garbage
    collector settled as the mesh's processes settle theirs
    (``boxoffice.lifecycle.settle_gc``) unless ``settle_gc=False``; with
    ``tls_role``, over mutual TLS with that role's certificate (dial it with
    :func:`channel`)."""
    argv = ["-m", "bench.echo_server", *(["--settle-gc"] if settle_gc else []), *(["--tls"] if tls_role else [])]
    with server_process(argv, role=tls_role) as server:
        yield server


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    # The server's CPU per answered call (µs) when closed_loop was given its pid.
    server_cpu_us: float = 0.0

    @property
    def rps(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0


async def closed_loop(
    call: Callable[[int], Awaitable[object]],
    *,
    concurrency: int,
    seconds: float,
    warmup_seconds: float = 1.0,
    server_pid: int | None = None,
) -> LoadFigures:
    """``concurrency`` workers call ``call(n)`` back to back (n counts up,
    unique across workers) for ``warmup_seconds`` then ``seconds``; only the
    measured part counts. Errors are counted, not raised. ``server_pid``:
    the server process whose CPU time per answered call is reported too."""
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
    cpu_began = cpu_seconds(server_pid) if server_pid is not None else 0.0
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - began
    cpu_used = cpu_seconds(server_pid) - cpu_began if server_pid is not None else 0.0
    latencies.sort()

    def pct(p: float) -> float:
        if not latencies:
            return 0.0
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return LoadFigures(len(latencies), errors, elapsed, pct(0.50), pct(0.99), cpu_used / max(1, len(latencies)) * 1e6)


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
