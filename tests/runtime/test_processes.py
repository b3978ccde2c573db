"""``BOXOFFICE_PROCESSES``: a server role as several processes on one port.

Each copy listens on the same gRPC port (SO_REUSEPORT) and serves metrics
on its own port; connections spread over the copies; SIGTERM stops them
all; a copy that dies takes the others down with it (the pod restarts
whole); the setting is refused where it cannot apply."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc

from boxoffice import access, caller
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as pb_grpc
from tests.runtime.processes import free_port, role_environ
from tests.support import Stores, channel_credentials

_HANDLED = 'grpc_server_handled_total{grpc_code="NotFound",grpc_method="GetQueuePosition"'


def _children(parent: int) -> list[int]:
    """The processes whose parent is ``parent`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


def _gone(pid: int) -> bool:
    """No process ``pid`` left (reaped by its parent)."""
    return not Path(f"/proc/{pid}").exists()


def _read(path: Path) -> str:
    return path.read_text(errors="replace")


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return str(answer.read().decode())
    except OSError:
        return None


def _handled(text: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(_HANDLED))


def _ports() -> tuple[int, int]:
    """A gRPC port and the first of two consecutive free metrics ports."""
    while True:
        metrics = free_port()
        if metrics + 1 < 65536 and _scrape(metrics + 1) is None:
            return free_port(), metrics


async def _until(check: Callable[[], bool], what: str, within: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await asyncio.to_thread(check):
        if loop.time() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        await asyncio.sleep(0.1)


async def _start(stores: Stores, tmp_path: Path, port: int, metrics: int) -> asyncio.subprocess.Process:
    env = role_environ(
        stores,
        "queue-svc",
        {
            "BOXOFFICE_PROCESSES": "2",
            "BOXOFFICE_GRPC_PORT": str(port),
            "BOXOFFICE_METRICS_PORT": str(metrics),
            "BOXOFFICE_LOG_LEVEL": "info",
        },
    )
    log = (tmp_path / "queue-svc.log").open("wb")
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "boxoffice_cli", "queue-svc", env=env, stdout=log, stderr=log
    )


async def test_two_processes_share_one_port_and_stop_together(stores: Stores, tmp_path: Path) -> None:
    port, metrics = _ports()
    supervisor = await _start(stores, tmp_path, port, metrics)
    try:
        await _until(lambda: _scrape(metrics) is not None and _scrape(metrics + 1) is not None, "both copies serve")
        assert len(_children(supervisor.pid)) == 2
        # Connections of their own: the kernel spreads them over the copies.
        pki = stores.pki
        credentials = channel_credentials(pki.files(access.EDGE), pki.files(access.EDGE).ca)
        channels = [
            grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials, options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(24)
        ]
        try:
            for n, chan in enumerate(channels):
                stub = pb_grpc.QueueServiceStub(chan)
                try:
                    await stub.GetQueuePosition(
                        pb.GetQueuePositionRequest(event_id=987_654_321),
                        metadata=((caller.CUSTOMER_METADATA_KEY, f"fan-{n}"),),
                        timeout=10,
                    )
                except grpc.aio.AioRpcError as err:
                    assert err.code() is grpc.StatusCode.NOT_FOUND, err
        finally:
            for chan in channels:
                await chan.close()
        counts = [_handled(_scrape(metrics) or ""), _handled(_scrape(metrics + 1) or "")]
        assert sum(counts) == 24 and min(counts) > 0, counts

        supervisor.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            assert await supervisor.wait() == 0
        assert _children(supervisor.pid) == []
        assert _scrape(metrics) is None and _scrape(metrics + 1) is None
        # Every log line says which copy wrote it (each logs its drain).
        lines = [json.loads(line) for line in _read(tmp_path / "queue-svc.log").splitlines() if line.startswith("{")]
        assert lines and {line.get("process") for line in lines} == {0, 1}
    finally:
        if supervisor.returncode is None:
            supervisor.kill()
            await supervisor.wait()


async def test_a_copy_that_dies_stops_the_other_and_the_supervisor_fails(stores: Stores, tmp_path: Path) -> None:
    port, metrics = _ports()
    supervisor = await _start(stores, tmp_path, port, metrics)
    try:
        await _until(lambda: _scrape(metrics) is not None and _scrape(metrics + 1) is not None, "both copies serve")
        first, second = _children(supervisor.pid)
        os.kill(first, signal.SIGKILL)
        async with asyncio.timeout(60):
            code = await supervisor.wait()
        assert code == 128 + signal.SIGKILL
        assert _gone(second)
        assert "process 0 ended" in _read(tmp_path / "queue-svc.log") or "process 1 ended" in _read(
            tmp_path / "queue-svc.log"
        )
    finally:
        if supervisor.returncode is None:
            supervisor.kill()
            await supervisor.wait()


async def test_only_copies_of_one_server_share_its_port(stores: Stores, tmp_path: Path) -> None:
    """Two copies under one supervisor share the port; a second queue-svc
    started on it (one process, or another supervisor's copies) is refused
    with one line before it listens, instead of silently taking a share of
    the first's connections."""
    port, metrics = _ports()
    supervisor = await _start(stores, tmp_path, port, metrics)
    try:
        await _until(lambda: _scrape(metrics) is not None and _scrape(metrics + 1) is not None, "both copies serve")
        for processes in ("1", "2"):
            other_metrics = free_port()
            env = role_environ(
                stores,
                "queue-svc",
                {
                    "BOXOFFICE_PROCESSES": processes,
                    "BOXOFFICE_GRPC_PORT": str(port),
                    "BOXOFFICE_METRICS_PORT": str(other_metrics),
                },
            )
            second = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "boxoffice_cli",
                "queue-svc",
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                async with asyncio.timeout(60):
                    _, err = await second.communicate()
            finally:
                if second.returncode is None:
                    second.kill()
                    await second.wait()
            lines = [line for line in err.decode().splitlines() if not line.startswith("{")]
            assert (second.returncode, lines) == (
                2,
                [
                    f"boxoffice: configuration error: {'queue' if processes == '1' else 'queue-svc'} cannot listen"
                    f" on 127.0.0.1:{port} (BOXOFFICE_GRPC_PORT): the port is in use"
                ],
            ), err.decode()
            assert _scrape(other_metrics) is None
        # The copies serve on, undisturbed.
        assert _scrape(metrics) is not None and _scrape(metrics + 1) is not None
    finally:
        supervisor.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            await supervisor.wait()
