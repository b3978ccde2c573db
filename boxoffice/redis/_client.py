"""Redis through redis.asyncio: one client per process, every key of an
event under the hash tag ``{ev:<id>}`` so that an event's scripts run on one
Redis Cluster shard."""

from __future__ import annotations

import redis.asyncio as aioredis


def event_key(event_id: int, *parts: str | int) -> str:
    """``{ev:<id>}:part:part`` - one hash slot per event."""
    suffix = ":".join(str(p) for p in parts)
    return f"{{ev:{event_id}}}:{suffix}" if suffix else f"{{ev:{event_id}}}"


def create_client(url: str, *, max_connections: int = 64, socket_timeout_seconds: float = 5.0) -> aioredis.Redis:
    """A pooled client. Per-call deadlines are applied by the caller
    (``deadline.bounded``); the socket timeout is only the last net."""
    return aioredis.Redis.from_url(
        url,
        max_connections=max_connections,
        socket_timeout=socket_timeout_seconds,
        socket_connect_timeout=socket_timeout_seconds,
        health_check_interval=30,
        decode_responses=False,
    )


class RedisComponent:
    """Checks Redis at start and closes the client's pool at stop."""

    def __init__(self, client: aioredis.Redis, name: str = "redis") -> None:
        self.name = name
        self.client = client

    async def start(self) -> None:
        await self.client.ping()

    async def stop(self, grace_seconds: float) -> None:
        await self.client.aclose()
