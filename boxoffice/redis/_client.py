"""Redis through redis.asyncio: one client per process, every key of an
event under the hash tag ``{ev:<id>}`` so that an event's scripts run on one
Redis Cluster shard.

The client is a plain :class:`redis.asyncio.Redis` or, with
``BOXOFFICE_REDIS_CLUSTER=true``, a :class:`redis.asyncio.RedisCluster`
that discovers the cluster from the node ``REDIS_URL`` names and routes
every command by the slot of its keys. Both speak the same commands, so the
services take a :data:`RedisClient` and never ask which one it is; only the
batcher (which routes its pipelines itself) does.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

# The client every service receives.
RedisClient = aioredis.Redis | RedisCluster


def event_key(event_id: int, *parts: str | int) -> str:
    """``{ev:<id>}:part:part`` - one hash slot per event."""
    suffix = ":".join(str(p) for p in parts)
    return f"{{ev:{event_id}}}:{suffix}" if suffix else f"{{ev:{event_id}}}"


def slot_of(key: str | bytes) -> int:
    """The Redis Cluster hash slot of ``key`` (its hash tag's, when it has one)."""
    return key_slot(key.encode() if isinstance(key, str) else key)


def create_client(
    url: str, *, cluster: bool = False, max_connections: int = 64, socket_timeout_seconds: float = 5.0
) -> RedisClient:
    """A pooled client (a cluster client when ``cluster``: ``url`` names any
    one node, database 0). Per-call deadlines are applied by the caller
    (``deadline.bounded``); the socket timeout is only the last net."""
    if cluster:
        return RedisCluster.from_url(
            url,
            max_connections=max_connections,
            socket_timeout=socket_timeout_seconds,
            socket_connect_timeout=socket_timeout_seconds,
            health_check_interval=30,
            decode_responses=False,
        )
    return aioredis.Redis.from_url(
        url,
        max_connections=max_connections,
        socket_timeout=socket_timeout_seconds,
        socket_connect_timeout=socket_timeout_seconds,
        health_check_interval=30,
        decode_responses=False,
    )


class RedisComponent:
    """Checks Redis at start (a cluster client learns the slot map) and
    closes the client's connections at stop."""

    def __init__(self, client: RedisClient, name: str = "redis") -> None:
        self.name = name
        self.client = client

    async def start(self) -> None:
        await self.client.ping()

    async def stop(self, grace_seconds: float) -> None:
        await self.client.aclose()
