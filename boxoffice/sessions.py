"""Ended shopping sessions: the queue records them, booking refuses their
tokens within about a second.

A token does not name its session; a session is one admission of one
customer to one event. When a session ends (EndShoppingSession, LeaveQueue,
an operator's RevokeCustomer) the queue records ``(event, customer) ->
ended at`` (milliseconds of the queue's clock) in one Redis sorted set, and
every token of that customer for that event issued at or before that moment
is dead; a token of a later admission, issued after it, lives. Entries
are kept as long as a token can live (:data:`RETENTION_MS`).

Booking keeps the set in memory (:class:`EndedSessionsView`), read again
from Redis every ``interval`` seconds (only what changed since the last
read), so the check per call is one dictionary lookup. On Redis loss the
view keeps what it knew and refuses those tokens still (fails open for
ends it has not seen): while Redis is down the queue, whose state lives in
Redis, cannot end a session either, so nothing is missed that could have
been recorded, and holds keep working on Postgres.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from boxoffice.clock import Clock
from boxoffice.errors import Unauthenticated, Unavailable
from boxoffice.tokens import AccessClaims

_log = logging.getLogger("boxoffice.sessions")

KEY = "boxoffice:sessions:ended"
# The longest a token lives (a waiting room's token_ttl is at most a day).
RETENTION_MS = 86_400_000
# A read takes the entries recorded since the last one's newest, less this
# (writes that land a little out of order are still seen).
_OVERLAP_MS = 5_000
_PRUNE_EVERY_SECONDS = 60.0
_CALL_SECONDS = 1.0


def _member(event_id: int, customer_id: str) -> str:
    return f"{event_id}:{customer_id}"


class EndedSessions:
    """The queue's side: records a session's end."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client

    async def record(self, event_id: int, customer_id: str, ended_at_ms: int, *, first: bool) -> None:
        """Record that the session ended at ``ended_at_ms``. ``first``: this
        call ended it (the time is set); otherwise a repeated end, which only
        records the time if none is (an earlier record that failed), so that
        it never kills the token of a later admission. UNAVAILABLE
        (``REDIS_UNAVAILABLE``) when Redis does not answer: the caller retries
        the end, which records it."""
        member = _member(event_id, customer_id)
        try:
            async with asyncio.timeout(_CALL_SECONDS):
                async with self._client.pipeline(transaction=False) as pipe:
                    if first:
                        pipe.zadd(KEY, {member: ended_at_ms}, gt=True)
                    else:
                        pipe.zadd(KEY, {member: ended_at_ms}, nx=True)
                    pipe.zremrangebyscore(KEY, "-inf", ended_at_ms - RETENTION_MS)
                    await pipe.execute()
        except (RedisError, OSError, TimeoutError) as err:
            raise Unavailable("the session's end could not be recorded; retry", reason="REDIS_UNAVAILABLE") from err


class EndedSessionsView:
    """Booking's side: the ended sessions in memory, refreshed by
    :meth:`run` (a background loop), checked by :meth:`check`."""

    def __init__(self, client: aioredis.Redis, clock: Clock, *, interval_seconds: float = 1.0) -> None:
        self._client = client
        self._clock = clock
        self._interval = interval_seconds
        self._ended: dict[tuple[int, str], int] = {}
        self._newest_ms: int | None = None
        self._pruned_at = 0.0

    def __len__(self) -> int:
        return len(self._ended)

    def check(self, claims: AccessClaims) -> None:
        """UNAUTHENTICATED (``SESSION_ENDED``) for a token issued before its
        session ended."""
        ended = self._ended.get((claims.event_id, claims.customer_id))
        if ended is not None and claims.issued_at_ms <= ended:
            raise Unauthenticated(
                "the session of this access token has ended; the waiting room admits again",
                reason="SESSION_ENDED",
            )

    async def refresh(self) -> None:
        """Read what was recorded since the last read (everything kept, the
        first time). Raises the Redis error; the loop logs it."""
        now_ms = int(self._clock.now() * 1000)
        since = now_ms - RETENTION_MS if self._newest_ms is None else self._newest_ms - _OVERLAP_MS
        async with asyncio.timeout(_CALL_SECONDS * 5):
            rows = await self._client.zrangebyscore(KEY, since, "+inf", withscores=True)
        for row in rows:
            raw, score = row[0], row[1]
            member = raw.decode() if isinstance(raw, bytes) else str(raw)
            event, _, customer = member.partition(":")
            try:
                key = (int(event), customer)
            except ValueError:
                continue
            ended = int(score)
            if ended > self._ended.get(key, -1):
                self._ended[key] = ended
            if self._newest_ms is None or ended > self._newest_ms:
                self._newest_ms = ended
        if self._newest_ms is None:
            self._newest_ms = since + _OVERLAP_MS
        if self._clock.now() - self._pruned_at >= _PRUNE_EVERY_SECONDS:
            self._pruned_at = self._clock.now()
            oldest = now_ms - RETENTION_MS
            self._ended = {key: ended for key, ended in self._ended.items() if ended >= oldest}

    async def run(self) -> None:
        """Refresh every interval until cancelled; a failed read keeps what
        is known (logged once per outage)."""
        failing = False
        while True:
            try:
                await self.refresh()
                if failing:
                    _log.info("ended sessions read again")
                failing = False
            except (RedisError, OSError, TimeoutError) as err:
                if not failing:
                    _log.warning("ended sessions not read; keeping what is known", extra={"error": type(err).__name__})
                failing = True
            await asyncio.sleep(self._interval)
