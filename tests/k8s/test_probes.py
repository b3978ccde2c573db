"""What the manifests' gRPC probes call exists: every background process
(``boxoffice admitter|sweeper|relay|issuer``) serves grpc.health.v1 on its
plaintext health port (kubelet presents no certificate) and, to the mesh,
on its mTLS gRPC port, says SERVING, and exits cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.k8s.support import ROOT
from tests.support import MESH_SECRETS, Stores, client_channel, tls_environ


async def _serving(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    """The process's "serving" log line (JSON on stderr)."""
    assert proc.stderr is not None
    async with asyncio.timeout(60):
        async for line in proc.stderr:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("msg") == "serving":
                return dict(entry)
    raise AssertionError(f"exited with {await proc.wait()} before serving")


@pytest.mark.parametrize("command", ["admitter", "sweeper", "relay", "issuer"])
async def test_background_process_answers_the_grpc_health_probe(stores: Stores, command: str) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": stores.database_url,
        "REDIS_URL": stores.redis_url,
        "BOXOFFICE_GRPC_HOST": "127.0.0.1",
        "BOXOFFICE_GRPC_PORT": "0",
        "BOXOFFICE_METRICS_PORT": "0",
        "BOXOFFICE_HEALTH_PORT": "0",
        "BOXOFFICE_SHUTDOWN_GRACE_SECONDS": "2",
        "POD_NAME": f"probe-{command}",
        **tls_environ(stores.pki.files(command)),
        **MESH_SECRETS,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "boxoffice_cli",
        command,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        serving = await _serving(proc)
        assert serving["tls"] is True and serving["health_port"]
        probe = f"127.0.0.1:{serving['health_port']}"
        for channel in (grpc.aio.insecure_channel(probe), client_channel(stores, str(serving["address"]), "operator")):
            async with channel:
                stub: Any = health_pb2_grpc.HealthStub(channel)  # the stubs type only sync channels
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            assert proc.stderr is not None
            await proc.stderr.read()
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
