"""What the manifests' probes call exists: every background process
(``boxoffice admitter|sweeper|relay|issuer``) serves grpc.health.v1 on its
plaintext health port (kubelet presents no certificate) and, to the mesh,
on its mTLS gRPC port, says SERVING, and exits cleanly on SIGTERM; the edge
answers its HTTP probes and drains as its Deployment expects."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.k8s.support import ROOT, config_map_data, of_kind
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


@pytest.mark.parametrize("command", ["admitter", "sweeper", "relay", "issuer", "mailer"])
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
        "BOXOFFICE_DRAIN_SECONDS": "0.5",
        "POD_NAME": f"probe-{command}",
        **tls_environ(stores.pki.files(command)),
        **MESH_SECRETS,
        # The mailer starts with a relay only (none listens there: nothing is sent).
        **({"BOXOFFICE_SMTP_URL": "smtp://127.0.0.1:9"} if command == "mailer" else {}),
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


async def _log_line(proc: asyncio.subprocess.Process, message: str) -> dict[str, Any]:
    """The first log line (JSON on stderr) whose message starts with ``message``."""
    assert proc.stderr is not None
    async with asyncio.timeout(60):
        async for line in proc.stderr:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if str(entry.get("msg", "")).startswith(message):
                return dict(entry)
    raise AssertionError(f"exited with {await proc.wait()} before logging {message!r}")


async def test_the_edge_answers_its_http_probes_and_drains_as_the_manifest_expects(
    stores: Stores, tmp_path: Path
) -> None:
    """``boxoffice edge`` with the manifests' settings (on loopback): the
    probes' paths answer on BOXOFFICE_EDGE_PORT, and on SIGTERM /readyz
    fails while requests are still answered for the drain, then the process
    exits 0 inside terminationGracePeriodSeconds."""
    (deployment,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "edge"]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    settings: dict[str, str] = {}
    for source in container["envFrom"]:
        settings.update(config_map_data(source["configMapRef"]["name"]))
    keys, jwks = tmp_path / "keys", tmp_path / "jwks.json"
    keys.write_text(f"k1:{secrets.token_urlsafe(32)}\n")
    jwks.write_text('{"keys": []}')
    with socket.socket() as probe:  # a free port for the edge
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BOXOFFICE_")},
        **settings,
        "BOXOFFICE_EDGE_HOST": "127.0.0.1",
        "BOXOFFICE_EDGE_PORT": str(port),
        "REDIS_URL": stores.redis_url,
        "BOXOFFICE_EDGE_SESSION_KEYS_FILE": str(keys),
        "BOXOFFICE_OIDC_JWKS_FILE": str(jwks),
        **tls_environ(stores.pki.files("edge")),
    }
    env.pop("DATABASE_URL", None)  # the edge has no database
    probes = {name: container[name]["httpGet"]["path"] for name in ("livenessProbe", "readinessProbe")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "boxoffice_cli",
        "edge",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await _log_line(proc, "Started server process")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            # As the kubelet does: every period, up to the startup probe's budget.
            startup = container["startupProbe"]
            for _ in range(startup["failureThreshold"]):
                if (await client.get(probes["readinessProbe"])).status_code == 200:
                    break
                await asyncio.sleep(startup["periodSeconds"])
            else:
                raise AssertionError("never ready within the startup probe's budget")
            assert (await client.get(probes["livenessProbe"])).status_code == 200
            assert (await client.get("/metrics")).status_code == 200

            proc.send_signal(signal.SIGTERM)
            stopping = time.monotonic()
            await _log_line(proc, "draining")
            assert (await client.get(probes["readinessProbe"])).status_code == 503
            assert (await client.get(probes["livenessProbe"])).status_code == 200
            assert (await client.get("/openapi.json")).status_code == 200  # still answering fans
        assert proc.stderr is not None
        async with asyncio.timeout(spec["terminationGracePeriodSeconds"]):
            await proc.stderr.read()
            assert await proc.wait() == 0
        assert time.monotonic() - stopping >= float(settings["BOXOFFICE_EDGE_DRAIN_SECONDS"]) - 0.5
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
