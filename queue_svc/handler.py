"""The waiting room's use cases, independent of gRPC: join, read, watch,
leave, end a session, and the administration of waiting rooms. The stores
come in through ``ports``; every error raised is built by ``errors``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Final

from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from boxoffice.sessions import EndedSessions
from boxoffice.tokens import TokenSigner
from queue_svc import errors, proofs, rebuild
from queue_svc.config import QueueSettings
from queue_svc.fan_draws import FanDraws
from queue_svc.jobs.progress import EventFeed, ProgressHub
from queue_svc.lanes import LaneDoor
from queue_svc.metrics import ServerMetrics
from queue_svc.model import (
    AdmissionState,
    DrawSecrets,
    Place,
    Position,
    PreQueueProof,
    Progress,
    ProofCursor,
    QueueState,
    WaitingRoomConfig,
    WatchBase,
    admission_state,
    estimate_ahead,
    measured_rate,
    passed,
)
from queue_svc.ports import (
    DrawRepository,
    FanOp,
    JoinLimits,
    JoinReply,
    JoinStatus,
    QueueStore,
    WaitingRoomRepository,
)

_log = logging.getLogger("queue_svc.handler")

# How long an event found missing in Postgres is not looked up again.
_UNKNOWN_EVENT_SECONDS = 2.0
_UNKNOWN_EVENTS_KEPT = 10_000


@dataclasses.dataclass(frozen=True, slots=True)
class Joined:
    """A join's answer: the fan's place, whether this call queued them, and
    their pseudonym in the event's pre-queue draw (the same on every join)."""

    position: Position
    newly_joined: bool
    pseudonym: str


# A load of draw secrets that failed: whoever waited for it loads again.
_RETRY: Final = object()


class DrawSecretsCache:
    """Each event's draw secrets, read from Postgres once per process (they
    never change) and by one caller at a time: the others wait for its
    answer instead of each asking Postgres (a crowd's first joins arrive
    together)."""

    def __init__(self, draws: DrawRepository, *, most: int = 10_000) -> None:
        self._draws = draws
        self._most = most
        self._known: dict[int, DrawSecrets] = {}
        self._loading: dict[int, asyncio.Future[object]] = {}

    async def get(self, event_id: int) -> DrawSecrets | None:
        """The event's secrets (its draw made if it has none), or None
        when the event has no waiting room."""
        while True:
            known = self._known.get(event_id)
            if known is not None:
                return known
            pending = self._loading.get(event_id)
            if pending is None:
                return await self._load(event_id)
            result = await asyncio.shield(pending)
            if result is not _RETRY:
                assert result is None or isinstance(result, DrawSecrets)
                return result

    async def _load(self, event_id: int) -> DrawSecrets | None:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._loading[event_id] = future
        found: DrawSecrets | None = None
        result: object = _RETRY
        try:
            record = await self._draws.get_or_create(event_id)
            found = result = None if record is None else record.secrets
        finally:
            del self._loading[event_id]
            future.set_result(result)
        if found is not None:
            if len(self._known) >= self._most:
                self._known.clear()
            self._known[event_id] = found
        return found


class QueueHandler:
    """Everything QueueService does, behind the servicer's parsing."""

    def __init__(
        self,
        *,
        store: QueueStore,
        rooms: WaitingRoomRepository,
        hub: ProgressHub,
        signer: TokenSigner,
        clock: Clock,
        settings: QueueSettings,
        metrics: ServerMetrics,
        draws: DrawRepository,
        sessions: EndedSessions | None = None,
        door: LaneDoor | None = None,
        fan_draws: FanDraws | None = None,
        generations: rebuild.RoomGenerations | None = None,
    ) -> None:
        self._store = store
        # Each room's generation in Postgres (None: every room is new).
        self._generations = generations
        self._rooms = rooms
        self._hub = hub
        self._signer = signer
        self._clock = clock
        self._settings = settings
        self._metrics = metrics
        # The pre-queue's draws: their secrets score and name the fans.
        self._draws = draws
        self._secrets = DrawSecretsCache(draws)
        # Where ended sessions are recorded, so that booking refuses their tokens.
        self._sessions = sessions
        # Who may join the lanes besides the general one (None: no lanes).
        self._door = door
        self._fan_draws = fan_draws
        # Events found to have no waiting room, until when (monotonic).
        self._unknown: dict[int, float] = {}
        self._limits = JoinLimits(
            per_account=settings.join_limit_per_account,
            per_client=settings.join_limit_per_client,
            window_ms=int(settings.join_limit_window_seconds * 1000),
        )
        joins = metrics.joins
        self._joined = joins.labels("joined")
        self._rejoined = joins.labels("rejoined")
        self._join_admitted = joins.labels("admitted")
        self._join_safety_net = joins.labels("safety_net")

    def _now_ms(self) -> int:
        return int(self._clock.now() * 1000)

    @property
    def fan_draws(self) -> FanDraws:
        """The verified-fan draws' use cases."""
        if self._fan_draws is None:
            raise errors.fan_draw_not_found(0)
        return self._fan_draws

    async def _mirror(self, event_id: int) -> bool:
        """Re-mirror a stored configuration that Redis lacks (a flushed or
        failed-over Redis); False when the event has no waiting room. An
        event found missing is not looked up again for a few seconds, so
        that calls for unknown events do not each cost a query."""
        now = time.monotonic()
        if self._unknown.get(event_id, 0.0) > now:
            return False
        config = await self._rooms.get(event_id)
        if config is None:
            if len(self._unknown) >= _UNKNOWN_EVENTS_KEPT:
                self._unknown.clear()
            self._unknown[event_id] = now + _UNKNOWN_EVENT_SECONDS
            return False
        self._unknown.pop(event_id, None)
        await self._store.put_config(config, generation=await self._stamp(event_id))
        return True

    async def _stamp(self, event_id: int) -> int:
        """The generation a mirror marks a room without a marker with: 0
        (none) when Postgres holds a history the admitter rebuilds from."""
        return 1 if self._generations is None else await self._generations.stamp(event_id)

    async def _mirror_quietly(self, config: WaitingRoomConfig) -> None:
        try:
            await self._store.put_config(config, generation=await self._stamp(config.event_id))
        except BoxofficeError as err:
            # Stored durably; the admitter re-mirrors every few seconds.
            _log.warning("configuration not mirrored", extra={"event_id": config.event_id, "reason": err.reason})

    # -- fans ---------------------------------------------------------------

    async def _draw_secrets(self, event_id: int) -> DrawSecrets:
        """The event's draw secrets; NOT_FOUND for an event without a
        waiting room (not asked again for a few seconds)."""
        now = time.monotonic()
        if self._unknown.get(event_id, 0.0) > now:
            raise errors.unknown_event(event_id)
        found = await self._secrets.get(event_id)
        if found is None:
            if len(self._unknown) >= _UNKNOWN_EVENTS_KEPT:
                self._unknown.clear()
            self._unknown[event_id] = now + _UNKNOWN_EVENT_SECONDS
            raise errors.unknown_event(event_id)
        return found

    async def _draw_if_possible(self, event_id: int) -> DrawSecrets | None:
        """The event's draw secrets, or None when they cannot be read now
        (the event has no waiting room, or Postgres is unreachable): a join
        after opening needs none."""
        try:
            return await self._draw_secrets(event_id)
        except BoxofficeError as err:
            if err.reason != "EVENT_NOT_FOUND":
                _log.warning("draw not read", extra={"event_id": event_id, "reason": err.reason})
            return None

    async def join(
        self,
        event_id: int,
        customer_id: str,
        client_id: str,
        *,
        lane: str = "",
        access_code: str = "",
        staff_pass: str = "",
    ) -> Joined:
        """The fan's place, queued now or already. Before opening the place
        is the fan's score in the event's draw, a function of the secret
        seed and the fan's pseudonym: joining again, even after leaving,
        lands on the same place. The draw's secrets are read once per
        process; a join after opening succeeds without them (its answer
        then lacks the pseudonym), one before opening needs them.

        A lane besides the general one is entered through its door (an
        access code, a staff pass); a fan waiting or admitted in another
        lane gets that place instead."""
        if lane or access_code or staff_pass:
            if self._door is None:
                raise errors.lane_not_found(event_id, lane)
            lane = await self._door.lane_for(event_id, lane=lane, access_code=access_code, staff_pass=staff_pass)
            if lane:
                await self._door.enter(event_id, customer_id, lane, access_code=access_code, staff_pass=staff_pass)
        draw = await self._draw_if_possible(event_id)
        pseudonym = "" if draw is None else draw.pseudonym(customer_id)
        score = -1 if draw is None else draw.score(pseudonym)
        reply = await self._join_once(event_id, customer_id, client_id, pseudonym, score, lane)
        if reply.status is JoinStatus.UNKNOWN_EVENT and await self._mirror(event_id):
            reply = await self._join_once(event_id, customer_id, client_id, pseudonym, score, lane)
        if reply.status is JoinStatus.NEEDS_DRAW:
            draw = await self._draw_secrets(event_id)  # NOT_FOUND, UNAVAILABLE
            pseudonym = draw.pseudonym(customer_id)
            reply = await self._join_once(event_id, customer_id, client_id, pseudonym, draw.score(pseudonym), lane)
        status = reply.status
        if status is JoinStatus.WAITING or status is JoinStatus.ADMITTED:
            now = self._now_ms()
            admission = admission_state(
                now_ms=now, opens_at_ms=reply.opens_at_ms, paused=reply.paused, sold_out=reply.sold_out
            )
            if status is JoinStatus.ADMITTED:
                # Newly joined and admitted: the safety net let them in at once.
                (self._join_safety_net if reply.newly_joined else self._join_admitted).inc()
                position = Position.past_the_queue(event_id, customer_id, QueueState.ADMITTED, admission)
                return Joined(_in_lane(position, reply.lane), reply.newly_joined, pseudonym)
            (self._joined if reply.newly_joined else self._rejoined).inc()
            rate = measured_rate(reply.rate_at_last_tick, reply.last_tick_ms, now)
            position = Position.waiting(
                event_id, customer_id, score=reply.score, ahead=reply.ahead, rate_per_second=rate, admission=admission
            )
            return Joined(_in_lane(position, reply.lane), reply.newly_joined, pseudonym)
        raise self._join_refused(event_id, reply)

    async def _join_once(
        self, event_id: int, customer_id: str, client_id: str, pseudonym: str, score: int, lane: str
    ) -> JoinReply:
        """One join; while the room waits for its rebuild, again each moment
        within the call's time (a join now would go ahead of the fans the
        rebuild puts back)."""
        while True:
            reply = await self._store.join(
                event_id,
                customer_id,
                client_id,
                now_ms=self._now_ms(),
                random_score=score,
                limits=self._limits,
                pseudonym=pseudonym,
                lane=lane,
            )
            if reply.status is not JoinStatus.REBUILDING or not await rebuild.wait_a_moment():
                return reply

    def _join_refused(self, event_id: int, reply: JoinReply) -> BoxofficeError:
        status = reply.status
        if status is JoinStatus.UNKNOWN_EVENT:
            result = "unknown_event"
        elif status is JoinStatus.NOT_OPEN:
            result = "not_open"
        else:
            result = "rate_limited"
        self._metrics.joins.labels(result).inc()
        return errors.join_refused(event_id, reply, window_seconds=self._settings.join_limit_window_seconds)

    async def _fan(self, event_id: int, customer_id: str, op: FanOp, reason: str = "") -> Place:
        place = await self._fan_once(event_id, customer_id, op, reason)
        if place is None and await self._mirror(event_id):
            place = await self._fan_once(event_id, customer_id, op, reason)
        if place is None:
            raise errors.unknown_event(event_id)
        return place

    async def _fan_once(self, event_id: int, customer_id: str, op: FanOp, reason: str) -> Place | None:
        """One read or change of the fan's place; while the room waits for
        its rebuild (the place comes back with it), again each moment."""
        while True:
            try:
                return await self._store.fan(event_id, customer_id, now_ms=self._now_ms(), op=op, reason=reason)
            except errors.RoomRebuilding:
                if not await rebuild.wait_a_moment():
                    raise

    def _position(self, event_id: int, customer_id: str, place: Place, *, with_token: bool) -> Position:
        return _in_lane(self._lane_position(event_id, customer_id, place, with_token=with_token), place.lane)

    def _lane_position(self, event_id: int, customer_id: str, place: Place, *, with_token: bool) -> Position:
        now = self._now_ms()
        admission = admission_state(
            now_ms=now, opens_at_ms=place.opens_at_ms, paused=place.paused, sold_out=place.sold_out
        )
        if place.state is QueueState.WAITING:
            rate = measured_rate(place.rate_at_last_tick, place.last_tick_ms, now)
            return Position.waiting(
                event_id, customer_id, score=place.score, ahead=place.ahead, rate_per_second=rate, admission=admission
            )
        if place.state is not QueueState.ADMITTED or not with_token:
            return Position.past_the_queue(event_id, customer_id, place.state, admission)
        # The token never outlives the session it opens.
        ttl_ms = min(place.token_ttl_ms, place.expires_at_ms - now)
        token, claims = self._signer.issue(
            event_id=event_id, customer_id=customer_id, ttl_seconds=max(1, ttl_ms // 1000)
        )
        self._metrics.tokens_issued.inc()
        return Position.past_the_queue(
            event_id, customer_id, place.state, admission, access_token=token, access_token_expires_at=claims.expires_at
        )

    async def position(self, event_id: int, customer_id: str) -> Position:
        """The fan's place; once admitted, with a token (the first read
        claims the admission and starts the session)."""
        place = await self._fan(event_id, customer_id, FanOp.CLAIM)
        return self._position(event_id, customer_id, place, with_token=True)

    async def leave(self, event_id: int, customer_id: str) -> Position:
        """A waiting fan leaves; others get their state back unchanged."""
        place = await self._fan(event_id, customer_id, FanOp.LEAVE)
        if place.changed:
            await self._session_ended(event_id, customer_id, first=True)
        return self._position(event_id, customer_id, place, with_token=False)

    async def record_presence(self, event_id: int, customer_ids: Sequence[str]) -> int:
        """The waiting fans among ``customer_ids`` are seen now (the rest are
        ignored); how many of them wait."""
        waiting = await self._store.record_presence(event_id, customer_ids, now_ms=self._now_ms())
        if waiting is None and await self._mirror(event_id):
            waiting = await self._store.record_presence(event_id, customer_ids, now_ms=self._now_ms())
        if waiting is None:
            raise errors.unknown_event(event_id)
        return waiting

    async def _session_ended(self, event_id: int, customer_id: str, *, first: bool) -> None:
        if self._sessions is not None:
            await self._sessions.record(event_id, customer_id, self._now_ms(), first=first)

    async def end_session(self, event_id: int, customer_id: str, reason: str) -> Position:
        """An admitted fan's session ends and frees the slot; ending an
        ended session again answers the same."""
        place = await self._fan(event_id, customer_id, FanOp.END, reason)
        if place.state is not QueueState.COMPLETED:
            raise errors.not_admitted(event_id, place.state)
        if place.changed:
            self._metrics.sessions_ended.labels(reason).inc()
        # The session's tokens stop working at booking (see boxoffice.sessions).
        await self._session_ended(event_id, customer_id, first=place.changed)
        return self._position(event_id, customer_id, place, with_token=False)

    async def watch_position(self, event_id: int, customer_id: str) -> PositionWatch:
        """A watch of the fan's place: the place now, then (``next``) each
        change until admitted (with a token) or another final state.
        Progress comes from the process's shared feed; Redis is asked
        again only when admission reaches the fan."""
        with deadline.scope(self._settings.stream_call_seconds):
            place = await self._fan(event_id, customer_id, FanOp.CLAIM)
        first = self._position(event_id, customer_id, place, with_token=True)
        if first.state is not QueueState.WAITING or first.admission_state is AdmissionState.SOLD_OUT:
            # Nothing more to watch: the answer now is the last one.
            return PositionWatch(self, event_id, customer_id, first, None, None)
        base = WatchBase(place.score, place.ahead, place.admitted_total, place.pre_queue_joined)
        # The hub reports the fans its watchers follow as present.
        feed = self._hub.join(event_id, watcher=customer_id, lane=place.lane)
        self._metrics.watchers_open.labels("position").inc()
        return PositionWatch(self, event_id, customer_id, first, base, feed)

    def release_watch(self, feed: EventFeed, customer_id: str) -> None:
        self._metrics.watchers_open.labels("position").dec()
        self._hub.leave(feed, watcher=customer_id)

    async def claim_position(self, event_id: int, customer_id: str) -> tuple[Place, Position]:
        with deadline.scope(self._settings.stream_call_seconds):
            place = await self._fan(event_id, customer_id, FanOp.CLAIM)
        return place, self._position(event_id, customer_id, place, with_token=True)

    def estimate(self, event_id: int, customer_id: str, score: int, ahead: int, progress: Progress) -> Position:
        return Position.waiting(
            event_id,
            customer_id,
            score=score,
            ahead=ahead,
            rate_per_second=progress.rate_per_second,
            admission=progress.admission_state,
        )

    # -- waiting rooms ------------------------------------------------------

    async def stats(self, event_id: int, lane: str = "") -> Progress:
        """The progress of the event's lane ("" the general one);
        LANE_NOT_FOUND for a lane the room does not have."""
        if lane:
            if self._door is None:
                raise errors.lane_not_found(event_id, lane)
            await self._door.lane(event_id, lane)
        progress = await self._store.progress(event_id, now_ms=self._now_ms(), lane=lane)
        if progress is None and await self._mirror(event_id):
            progress = await self._store.progress(event_id, now_ms=self._now_ms(), lane=lane)
        if progress is None:
            raise errors.unknown_event(event_id)
        return progress

    async def watch_progress(self, event_id: int, lane: str = "") -> AsyncIterator[Progress]:
        """The progress of the event's lane now, then whenever it changes."""
        with deadline.scope(self._settings.stream_call_seconds):
            progress = await self.stats(event_id, lane)
        yield progress
        sent = _progress_key(progress)
        gauge = self._metrics.watchers_open.labels("progress")
        feed = self._hub.join(event_id, lane=lane)
        gauge.inc()
        try:
            latest: Progress | None = None
            while True:
                latest = await feed.next(latest, any_change=True)
                key = _progress_key(latest)
                if key != sent:
                    sent = key
                    yield latest
        finally:
            gauge.dec()
            self._hub.leave(feed)

    async def create_waiting_room(self, config: WaitingRoomConfig) -> WaitingRoomConfig:
        """Store the room and make its draw (the seed is committed from
        now on, before anyone can join)."""
        stored = await self._rooms.create(config)
        await self._draws.get_or_create(stored.event_id)
        self._unknown.pop(stored.event_id, None)
        await self._mirror_quietly(stored)
        return stored

    async def update_waiting_room(self, config: WaitingRoomConfig) -> WaitingRoomConfig:
        stored = await self._rooms.update(config)
        await self._mirror_quietly(stored)
        return stored

    async def get_waiting_room(self, event_id: int) -> WaitingRoomConfig:
        stored = await self._rooms.get(event_id)
        if stored is None:
            raise errors.unknown_event(event_id)
        return stored

    async def set_paused(self, event_id: int, paused: bool) -> WaitingRoomConfig:
        stored = await self._rooms.set_paused(event_id, paused)
        await self._mirror_quietly(stored)
        return stored

    # -- the pre-queue's draw -----------------------------------------------

    async def pre_queue_proof(self, event_id: int, *, page_size: int, after: ProofCursor | None) -> PreQueueProof:
        """The public proof of the event's pre-queue shuffle: the commitment
        always; once the draw recorder sealed the pre-queue (at opening),
        the seed and one page of the participants in the draw's order."""
        config = await self._rooms.get(event_id)
        record = None if config is None else await self._draws.get_or_create(event_id)
        if config is None or record is None:
            raise errors.unknown_event(event_id)
        return await proofs.published(
            self._draws, record, opens_at_ms=config.opens_at_ms, page_size=page_size, after=after
        )


def _in_lane(position: Position, lane: str) -> Position:
    return dataclasses.replace(position, lane=lane) if lane else position


class PositionWatch:
    """One stream's watch of one fan: ``first``, then ``next()`` until it
    answers None; ``close()`` once done (leaves the event's feed).

    ``next`` is what every watcher runs at every tick, so it stays free of
    Redis calls (except when admission reaches the fan) and allocates
    little: one waiter future, and the position it answers.
    """

    def __init__(
        self,
        handler: QueueHandler,
        event_id: int,
        customer_id: str,
        first: Position,
        base: WatchBase | None,
        feed: EventFeed | None,
    ) -> None:
        self.first = first
        self._handler = handler
        self._event_id = event_id
        self._customer_id = customer_id
        self._base = base
        self._feed = feed
        self._seen: Progress | None = None
        self._ahead = first.ahead
        self._admission = first.admission_state

    async def next(self) -> Position | None:
        base, feed = self._base, self._feed
        if base is None or feed is None:
            return None
        while True:
            progress = feed.latest
            if feed.closed:
                raise errors.draining()
            if progress is None or progress is self._seen:
                await feed.moved()
                continue
            self._seen = progress
            if passed(base.score, progress):
                place, position = await self._handler.claim_position(self._event_id, self._customer_id)
                if position.state is not QueueState.WAITING:
                    self._base = None
                    return position
                # Queued again behind (left and re-joined): follow the new place.
                base = self._base = WatchBase(place.score, place.ahead, place.admitted_total, place.pre_queue_joined)
                ahead = place.ahead
            else:
                ahead = estimate_ahead(base, progress)
            admission = progress.admission_state
            if ahead != self._ahead or admission is not self._admission:
                self._ahead, self._admission = ahead, admission
                if admission is AdmissionState.SOLD_OUT:
                    # Sold out: this answer is the stream's last.
                    self._base = None
                return self._handler.estimate(self._event_id, self._customer_id, base.score, ahead, progress)

    def close(self) -> None:
        feed, self._feed = self._feed, None
        if feed is not None:
            self._handler.release_watch(feed, self._customer_id)


def _progress_key(progress: Progress) -> tuple[int, int, int, int, AdmissionState, float]:
    return (
        progress.admitted_through_score,
        progress.queue_length,
        progress.active_shoppers,
        progress.admitted_total,
        progress.admission_state,
        round(progress.rate_per_second, 1),
    )
