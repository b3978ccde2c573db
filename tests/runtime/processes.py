"""Roles of the mesh as the cluster runs them: one ``boxoffice <command>``
process each, against the test stores, with its own identity."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tests.support import Stores, tls_environ

# Each command's component (its certificate's role).
COMMANDS = {
    "queue-svc": "queue",
    "admitter": "queue",
    "booking-svc": "booking",
    "sweeper": "booking",
    "relay": "booking",
    "payment-svc": "payment",
    "issuer": "payment",
    "checkin": "checkin",
}
# Secrets that are not the development ones (a process off the embedded
# stores refuses those).
_SECRETS = {
    "BOXOFFICE_TOKEN_KEYS": "test:role-processes-token-key-0123456789",
    "BOXOFFICE_WEBHOOK_SECRETS": "test:role-processes-webhook-secret-0123",
    "BOXOFFICE_CHECKIN_KEYS": "test:" + "5eed" * 16,
    "BOXOFFICE_SANDBOX_WEBHOOK_SECRET": "role-processes-webhook-secret-0123",
    "BOXOFFICE_PAYMENT_PROVIDER": "sandbox",
}


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, below the kernel's ephemeral range (an ephemeral
    port would soon be some outgoing connection's, as the processes'
    many connections to the stores take them)."""
    for _ in range(100):
        port = secrets.randbelow(20_000) + 10_000
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


@dataclass
class Role:
    command: str
    process: asyncio.subprocess.Process
    metrics_port: int
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def role_environ(stores: Stores, command: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of one role's process: the test stores, its own
    certificate, ephemeral ports, no plaintext health port."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("BOXOFFICE_", "PG")) and key not in ("DATABASE_URL", "DATABASE_DIRECT_URL", "REDIS_URL")
    }
    env.update(_SECRETS)
    # A command not listed (the mailer, which needs its relay) is its own role.
    env.update(tls_environ(stores.pki.files(COMMANDS.get(command, command))))
    env.update(
        {
            "DATABASE_URL": stores.database_url,
            "REDIS_URL": stores.redis_url,
            "BOXOFFICE_TRUST_DOMAIN": "boxoffice.local",
            "BOXOFFICE_GRPC_PORT": "0",
            "BOXOFFICE_METRICS_HOST": "127.0.0.1",
            "BOXOFFICE_HEALTH_PORT": "off",
            "BOXOFFICE_DRAIN_SECONDS": "0",
            "BOXOFFICE_LOG_LEVEL": "warning",
        }
    )
    env.update(environ or {})
    return env


@contextlib.asynccontextmanager
async def role_processes(
    stores: Stores, commands: Sequence[tuple[str, Mapping[str, str]]], log_dir: Path
) -> AsyncIterator[list[Role]]:
    """Each command (with its extra settings) in its own process, stopped
    with SIGTERM afterwards."""
    roles: list[Role] = []
    try:
        for command, extra in commands:
            metrics_port = int(extra.get("BOXOFFICE_METRICS_PORT", free_port()))
            env = role_environ(stores, command, {"BOXOFFICE_METRICS_PORT": str(metrics_port), **extra})
            log = log_dir / f"{command}-{len(roles)}.log"
            with log.open("wb") as out:
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "boxoffice_cli", command, env=env, stdout=out, stderr=out
                )
            roles.append(Role(command, process, metrics_port, log))
        yield roles
    finally:
        for role in roles:
            if role.process.returncode is None:
                role.process.send_signal(signal.SIGTERM)
        for role in roles:
            try:
                async with asyncio.timeout(30):
                    await role.process.wait()
            except TimeoutError:
                role.process.kill()
                await role.process.wait()


async def until_serving(roles: Sequence[Role], probes: Sequence[tuple[Any, Any, Any]]) -> None:
    """Until each probe (a stub's method, a request, the call's metadata)
    is answered anything but UNAVAILABLE; every role must stay up meanwhile."""
    for method, request, metadata in probes:
        for _ in range(600):
            try:
                await method(request, metadata=metadata, timeout=5)
                break
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE:
                    break
            for role in roles:
                assert role.process.returncode is None, f"{role.command} ended: {role.stderr()}"
            await asyncio.sleep(0.1)
