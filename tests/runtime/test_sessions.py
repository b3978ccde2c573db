"""Ended sessions against a real Redis: a token issued at or before its
session's end is refused, one issued after lives; the view reads only what
changed (each refresh after the first); a repeated end never moves the end
past a later admission; ends older than a token can live are dropped; and
on Redis loss the view keeps refusing what it knew."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from boxoffice.embedded import EmbeddedRedis
from boxoffice.errors import Unauthenticated, Unavailable
from boxoffice.sessions import KEY, RETENTION_MS, EndedSessions, EndedSessionsView
from boxoffice.tokens import AccessClaims
from tests.support import ManualClock, Stores


def _claims(event_id: int, customer_id: str, issued_at_ms: int) -> AccessClaims:
    return AccessClaims(event_id, customer_id, issued_at_ms // 1000, issued_at_ms // 1000 + 600, "j", issued_at_ms)


async def test_a_token_of_an_ended_session_is_refused_and_a_later_ones_lives(redis_client: aioredis.Redis) -> None:
    # The present: the view reads the ends recorded since the newest it has
    # seen, and other tests record theirs on this Redis at the present too.
    clock = ManualClock()
    now_ms = int(clock.now() * 1000)
    fan = f"fan-{uuid.uuid4().hex[:8]}"
    sessions = EndedSessions(redis_client)
    view = EndedSessionsView(redis_client, clock)
    await view.refresh()
    before, at, after = _claims(7, fan, now_ms - 10), _claims(7, fan, now_ms), _claims(7, fan, now_ms + 1)
    view.check(before)
    await sessions.record(7, fan, now_ms, first=True)
    await view.refresh()
    for claims in (before, at):
        with pytest.raises(Unauthenticated) as refused:
            view.check(claims)
        assert refused.value.reason == "SESSION_ENDED"
    view.check(after)
    view.check(_claims(8, fan, now_ms - 10))  # another event's session
    # A repeated end (a retry) records nothing new: the later token lives.
    await sessions.record(7, fan, now_ms + 500, first=False)
    await view.refresh()
    view.check(after)
    # The end of a later session moves the end forward.
    await sessions.record(7, fan, now_ms + 500, first=True)
    await view.refresh()
    with pytest.raises(Unauthenticated):
        view.check(after)


async def test_old_ends_are_dropped_as_new_ones_are_recorded(redis_client: aioredis.Redis) -> None:
    now_ms = int(ManualClock(2_000_000.0).now() * 1000)
    fan = f"fan-{uuid.uuid4().hex[:8]}"
    await EndedSessions(redis_client).record(9, fan, now_ms, first=True)
    # Entries older than a token can live are dropped as new ones are recorded.
    await redis_client.zadd(KEY, {f"9:{fan}-old": now_ms - RETENTION_MS - 1})
    await EndedSessions(redis_client).record(9, f"{fan}-2", now_ms, first=True)
    assert await redis_client.zscore(KEY, f"9:{fan}-old") is None
    assert await redis_client.zscore(KEY, f"9:{fan}") is not None


async def test_the_view_keeps_refusing_what_it_knew_when_redis_is_lost(stores: Stores) -> None:
    """A Redis of its own, stopped under the view: the refresh fails, the
    ends it read still refuse their tokens, and no end can be recorded."""
    clock = ManualClock(2_000_000.0)
    now_ms = int(clock.now() * 1000)
    fan = f"fan-{uuid.uuid4().hex[:8]}"
    server = EmbeddedRedis(stores.tmp / f"redis-sessions-{uuid.uuid4().hex[:8]}")
    client = aioredis.Redis.from_url(server.start(), socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        await EndedSessions(client).record(9, fan, now_ms, first=True)
        view = EndedSessionsView(client, clock)
        await view.refresh()
        server.stop()  # Redis lost
        with pytest.raises(RedisError):
            await view.refresh()
        with pytest.raises(Unauthenticated):
            view.check(_claims(9, fan, now_ms - 1))
        with pytest.raises(Unavailable) as unrecorded:
            await EndedSessions(client).record(9, fan, now_ms, first=True)
        assert unrecorded.value.reason == "REDIS_UNAVAILABLE"
    finally:
        await client.aclose()
        server.stop()
