"""One process per core: a gRPC server role as several processes on one port.

A grpc.aio server runs its Python on one core (the event loop holds the
GIL), so a pod of two cores with one process leaves one mostly idle.
``BOXOFFICE_PROCESSES=N`` makes ``boxoffice queue-svc`` (or ``booking-svc``,
``payment-svc``) a supervisor of N copies of itself: each listens on the
same gRPC and health ports (the copies, marked by ``BOXOFFICE_PROCESS_INDEX``,
and only they set ``SO_REUSEPORT``, and the kernel spreads new connections
over the listeners; the supervisor checks the ports are free before it
starts them, so a second mesh on them is refused), serves its
metrics on a port of its own (``BOXOFFICE_METRICS_PORT`` plus its index:
Prometheus scrapes each as an instance of the pod) and has its own pools.

The supervisor passes SIGTERM and SIGINT on to every copy (each fails its
readiness, drains and exits as one process would); when a copy ends on its
own, the supervisor stops the others and exits with that copy's status, so
that the pod restarts whole rather than running short of a process.
``bench.processes`` measures what the second process buys.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import FrameType

from boxoffice.config import ConfigError, Env

# Server roles that may run as several processes (an elected or background
# role runs once per pod; the edge scales by pods).
SERVER_COMMANDS = frozenset({"queue-svc", "booking-svc", "payment-svc"})
MAX_PROCESSES = 64
# How long the others get to stop once one copy has ended on its own.
_STOP_OTHERS_SECONDS = 30.0


def process_count(env: Env, command: str, *, on_embedded_stores: bool) -> int:
    """``BOXOFFICE_PROCESSES`` for ``command`` (1 unless set; ConfigError
    names the setting when it cannot apply)."""
    count = env.integer("BOXOFFICE_PROCESSES", 1, minimum=1, maximum=MAX_PROCESSES)
    if count == 1:
        return 1
    if command not in SERVER_COMMANDS:
        raise ConfigError(
            f"BOXOFFICE_PROCESSES={count} applies to the server roles ({', '.join(sorted(SERVER_COMMANDS))}),"
            f" not to {command}"
        )
    if on_embedded_stores:
        raise ConfigError(f"BOXOFFICE_PROCESSES={count} needs DATABASE_URL and REDIS_URL (not the embedded stores)")
    return count


def supervise(command: str, count: int, environ: Mapping[str, str], metrics_port: int) -> int:
    """Run ``count`` copies of ``boxoffice <command>`` until they end; their
    exit status (the first to end on its own decides)."""
    children: list[subprocess.Popen[bytes]] = []
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for index in range(count):
            env = {**environ, "BOXOFFICE_PROCESSES": "1", "BOXOFFICE_PROCESS_INDEX": str(index)}
            if metrics_port:
                env["BOXOFFICE_METRICS_PORT"] = str(metrics_port + index)
            children.append(subprocess.Popen([sys.executable, "-m", "boxoffice_cli", command], env=env))
        first = _wait_any(children)
        if not stopping:
            print(
                f"boxoffice: {command} process {children.index(first)} ended ({first.returncode}); stopping the others",
                file=sys.stderr,
                flush=True,
            )
            _stop(children)
        for child in children:
            child.wait()
        code = first.returncode if first.returncode is not None else 1
        # Killed by a signal: the shell's convention (128 + its number).
        return 128 - code if code < 0 else code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def _wait_any(children: Sequence[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """The first child to end (os.wait is retried after a signal's handler)."""
    by_pid = {child.pid: child for child in children}
    while True:
        pid, status = os.wait()
        child = by_pid.get(pid)
        if child is not None:
            child.returncode = os.waitstatus_to_exitcode(status)
            return child


def _stop(children: Sequence[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + _STOP_OTHERS_SECONDS
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
