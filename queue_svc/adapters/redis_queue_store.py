"""The queue store on Redis (``ports.QueueStore``).

Per event, under the hash tag ``{ev:<id>}``:

- ``cfg``  hash: the mirrored configuration the scripts read
- ``q``    sorted set: waiting fans (member customer id, score queue score)
- ``adm``  sorted set: admitted fans who have not claimed a token yet
  (score: the claim deadline, ms)
- ``act``  sorted set: shopping fans (score: the session's end, ms)
- ``seen`` sorted set: the waiting fans again (score: when last seen, ms;
  joined, read their place, or reported present by RecordPresence); the
  admit tick drops the head of it older than the presence grace
- ``shadow`` set: the fans an operator flagged (never admitted)
- ``shq``  sorted set: flagged fans whom admission reached (score: their
  queue score), who read a normal wait there
- ``out``  hash: how a fan's last visit ended (E expired, L left, C completed,
  D dropped)
- ``prog`` hash: leader epoch, admitted-through score, totals, measured
  rate, the admitter's target rate and its reason, claimed and no-show totals
- ``seq``  the arrival sequence after opening
- ``rl:<window>`` hash: join counters of one rate-limit window
- ``preq`` list: the log of pre-queue placements ("<pseudonym> <score>"),
  which the draw recorder copies to Postgres (``prog`` field ``sealed``:
  the recorder closed the pre-queue)
- ``life`` list: the lifecycle log, one entry per change of a fan's state
  (``queue_svc.jobs.lifecycle``), appended by the script that makes the
  change and copied to Postgres by the lifecycle recorder
- ``lifen`` the number of entries trimmed from the head of ``life`` (copied),
  so that an entry's absolute index is ``lifen`` + its place in the list
- ``refused`` hash: joins refused, per reason (the recorder copies the totals)
- ``gen`` the room's generation marker (``queue_svc.rebuild``): written with
  the room's first configuration, gone with its data; while it is missing
  (or older than Postgres's), joins and reads wait and nobody is admitted
  until the admitter rebuilt the room from Postgres

A waiting fan costs a member of each of two sorted sets and nothing else. Every change is
one Lua script (the package's ``lua/*.lua``), keys through KEYS and the clock
through ARGV. Each script's reply is decoded here, into the ports' values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from boxoffice.draw import Entry
from boxoffice.redis import Arg, ScriptBatcher, event_key, load_script
from queue_svc import errors
from queue_svc.model import (
    PRE_QUEUE_BAND,
    RATE_WINDOW_MS,
    Place,
    Progress,
    QueueState,
    RateReason,
    TickResult,
    WaitingRoomConfig,
)
from queue_svc.ports import FanOp, JoinLimits, JoinReply, JoinStatus, LifecycleLog, PreQueueLog

# Expirations (and drops) an admit tick processes per sorted set at most
# (bounds the time one tick holds Redis; the rest go in the next tick).
MAX_EXPIRED_PER_TICK = 10_000
# Customer ids one RecordPresence call may name at most.
MAX_PRESENCE_BATCH = 1000


# The scripts' reply codes: the join's outcomes; an unknown event (every
# script); an admit tick refused for a stale leader epoch.
_UNKNOWN_EVENT = -1
_STALE_EPOCH = -5
# A join or fan script's answer: the fan is bound to another lane.
_BOUND_ELSEWHERE = -7
# The room lost its data and is not rebuilt yet (join, fan, admit).
_ROOM_LOST = -8
# Lifecycle entries are numbered within their generation: index =
# (generation - 1) * GENERATION_SPAN + place in that generation's log (the
# first generation's are numbered as before generations existed).
GENERATION_SPAN = 1 << 40
# A fan's call follows their lane this many times at most (the binding
# moves only when the fan is neither waiting nor admitted).
_LANE_TRIES = 4


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_JOIN_CODES = {
    1: JoinStatus.WAITING,
    2: JoinStatus.ADMITTED,
    _UNKNOWN_EVENT: JoinStatus.UNKNOWN_EVENT,
    -2: JoinStatus.NOT_OPEN,
    -3: JoinStatus.ACCOUNT_LIMITED,
    -4: JoinStatus.CLIENT_LIMITED,
    -6: JoinStatus.NEEDS_DRAW,
    _ROOM_LOST: JoinStatus.REBUILDING,
}


@dataclass(frozen=True, slots=True)
class EventKeys:
    """The Redis keys of one event, in the order the scripts take them."""

    config: str
    queue: str
    admitted: str
    active: str
    outcomes: str
    progress: str
    seen: str
    shadow: str
    shadow_queue: str
    sequence: str
    pre_queue_log: str
    lifecycle: str
    lifecycle_trimmed: str
    refusals: str
    # Which lane each fan is bound to (lane.lua), and the prefix of the
    # join counters' keys: both the event's, whatever the lane.
    lanes: str
    # The room's generation marker (the event's, whatever the lane).
    generation: str
    limits_prefix: str
    # The keys the join, fan, admit and progress scripts take first, in this order.
    common: tuple[str, str, str, str, str, str, str, str, str]

    @classmethod
    def of(cls, event_id: int, lane: str = "") -> EventKeys:
        """The keys of the event's lane ("" the general one). A lane has its
        own configuration, queue, progress, seen set and sequence (under
        ``L:<lane>:``); the admitted and active sets (the one cap), the
        outcomes, the shadow lane and the logs are the event's."""
        own = ("L", lane) if lane else ()
        config, queue, progress, seen = (event_key(event_id, *own, part) for part in ("cfg", "q", "prog", "seen"))
        admitted, active, outcomes, shadow, shadow_queue = (
            event_key(event_id, part) for part in ("adm", "act", "out", "shadow", "shq")
        )
        return cls(
            config=config,
            queue=queue,
            admitted=admitted,
            active=active,
            outcomes=outcomes,
            progress=progress,
            seen=seen,
            shadow=shadow,
            shadow_queue=shadow_queue,
            sequence=event_key(event_id, *own, "seq"),
            pre_queue_log=event_key(event_id, "preq"),
            lifecycle=event_key(event_id, "life"),
            lifecycle_trimmed=event_key(event_id, "lifen"),
            refusals=event_key(event_id, "refused"),
            lanes=event_key(event_id, "lanes"),
            generation=event_key(event_id, "gen"),
            limits_prefix=f"{event_key(event_id)}:",
            common=(config, queue, admitted, active, outcomes, progress, seen, shadow, shadow_queue),
        )

    def limits(self, window: int) -> str:
        return f"{self.limits_prefix}rl:{window}"


def _int(value: Any) -> int:
    return int(value) if value is not None else 0


def _float(value: Any) -> float:
    if isinstance(value, bytes):
        value = value.decode()
    return float(value or 0)


def _reason(value: Any) -> RateReason:
    try:
        return RateReason(int(value or RateReason.BASE))
    except ValueError:
        return RateReason.BASE


class RedisQueueStore:
    """The queue store on Redis; all calls go through a ScriptBatcher."""

    def __init__(self, batcher: ScriptBatcher) -> None:
        self._batcher = batcher
        self._join = load_script("queue_svc", "join")
        self._fan = load_script("queue_svc", "fan")
        self._admit = load_script("queue_svc", "admit")
        self._progress = load_script("queue_svc", "progress")
        self._config_put = load_script("queue_svc", "config_put")
        self._presence = load_script("queue_svc", "presence")
        self._flag = load_script("queue_svc", "flag")
        self._pre_queue = load_script("queue_svc", "prequeue")
        self._lifecycle = load_script("queue_svc", "lifecycle")
        self._lane = load_script("queue_svc", "lane")
        self._refuse = load_script("queue_svc", "refuse")
        self._staff_pass = load_script("queue_svc", "staffpass")
        self._keys: dict[tuple[int, str], EventKeys] = {}

    def keys(self, event_id: int, lane: str = "") -> EventKeys:
        keys = self._keys.get((event_id, lane))
        if keys is None:
            if len(self._keys) > 10_000:
                self._keys.clear()
            keys = self._keys[(event_id, lane)] = EventKeys.of(event_id, lane)
        return keys

    async def bind_staff_pass(self, event_id: int, pass_id: str, customer_id: str, *, keep_ms: int) -> bool:
        key = event_key(event_id, "staffpass", pass_id)
        return bool(int(await self._batcher.call(self._staff_pass, (key,), (customer_id, max(1, keep_ms)))))

    async def put_staff_pass(self, event_id: int, pass_id: str, customer_id: str, *, keep_ms: int) -> None:
        key = event_key(event_id, "staffpass", pass_id)
        await self._batcher.call(self._staff_pass, (key,), (customer_id, max(1, keep_ms), 1))

    async def count_refusal(self, event_id: int, reason: str) -> None:
        await self._batcher.call(self._refuse, (self.keys(event_id).refusals,), (reason,))

    async def _bound_lane(self, event_id: int, customer_id: str, want: str, bound: str) -> str:
        """The lane a fan's call goes to, after their script answered that
        they are bound to ``bound``, not ``want`` (lane.lua)."""
        keys = self.keys(event_id, bound)
        reply = await self._batcher.call(
            self._lane,
            (keys.lanes, keys.admitted, keys.active, keys.shadow_queue, keys.queue),
            (customer_id, want, bound),
        )
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    async def join(
        self,
        event_id: int,
        customer_id: str,
        client_id: str,
        *,
        now_ms: int,
        random_score: int,
        limits: JoinLimits,
        pseudonym: str = "",
        lane: str = "",
    ) -> JoinReply:
        window = now_ms // limits.window_ms
        for _ in range(_LANE_TRIES):
            keys = self.keys(event_id, lane)
            args: list[Arg] = [
                customer_id,
                now_ms,
                random_score,
                client_id,
                limits.per_account,
                limits.per_client,
                limits.window_ms,
                PRE_QUEUE_BAND,
                pseudonym,
                lane,
            ]
            reply = await self._batcher.call(
                self._join,
                (
                    *keys.common,
                    keys.sequence,
                    keys.limits(window),
                    keys.pre_queue_log,
                    keys.lifecycle,
                    keys.refusals,
                    keys.lanes,
                    keys.generation,
                ),
                args,
            )
            if int(reply[0]) != _BOUND_ELSEWHERE:
                break
            lane = await self._bound_lane(event_id, customer_id, lane, _text(reply[1]))
        else:
            raise errors.lane_changed(event_id)
        status = _JOIN_CODES[int(reply[0])]
        if status is JoinStatus.UNKNOWN_EVENT or status is JoinStatus.REBUILDING:
            return JoinReply(status)
        return JoinReply(
            lane=lane,
            status=status,
            score=int(reply[1]),
            ahead=int(reply[2]),
            newly_joined=bool(reply[3]),
            opens_at_ms=int(reply[4]),
            paused=bool(int(reply[5]) & 1),
            sold_out=bool(int(reply[5]) & 2),
            admitted_total=int(reply[6]),
            rate_at_last_tick=_float(reply[7]),
            last_tick_ms=int(reply[8]),
        )

    async def fan(
        self, event_id: int, customer_id: str, *, now_ms: int, op: FanOp, reason: str = "", lane: str = ""
    ) -> Place | None:
        for _ in range(_LANE_TRIES):
            keys = self.keys(event_id, lane)
            reply = await self._batcher.call(
                self._fan,
                (*keys.common, keys.lifecycle, keys.lanes, keys.generation),
                (customer_id, now_ms, op.value, reason, lane),
            )
            if int(reply[0]) != _BOUND_ELSEWHERE:
                break
            # Bound to another lane: the place is there (no rebinding for a read).
            lane = _text(reply[1])
        else:
            raise errors.lane_changed(event_id)
        state = int(reply[0])
        if state == _ROOM_LOST:
            raise errors.RoomRebuilding(event_id)
        if state < 0:
            return None
        return Place(
            lane=lane,
            state=QueueState(state),
            score=int(reply[1]),
            ahead=int(reply[2]),
            expires_at_ms=int(reply[3]),
            claimed_now=bool(reply[4]) and op is FanOp.CLAIM,
            changed=bool(reply[4]),
            opens_at_ms=int(reply[5]),
            paused=bool(int(reply[6]) & 1),
            sold_out=bool(int(reply[6]) & 2),
            token_ttl_ms=int(reply[7]),
            rate_at_last_tick=_float(reply[8]),
            last_tick_ms=int(reply[9]),
            admitted_total=int(reply[10]),
            pre_queue_joined=int(reply[11]),
        )

    async def admit(
        self,
        event_id: int,
        *,
        now_ms: int,
        epoch: int,
        target_rate: float = 0.0,
        reason: RateReason = RateReason.BASE,
        lane: str = "",
        slot_share: float = 1.0,
        generation: int = 0,
        sold_out: bool | None = None,
        outside: int = 0,
    ) -> TickResult | None:
        args: list[Arg] = [
            now_ms,
            epoch,
            MAX_EXPIRED_PER_TICK,
            RATE_WINDOW_MS,
            float(target_rate),
            int(reason),
            min(max(slot_share, 0.0), 1.0),
            generation,
            "" if sold_out is None else int(sold_out),
            max(outside, 0),
        ]
        keys = self.keys(event_id, lane)
        reply = await self._batcher.call(self._admit, (*keys.common, keys.lifecycle, keys.generation), args)
        code = int(reply[0])
        if code == _UNKNOWN_EVENT:
            return None
        if code == _ROOM_LOST:
            return TickResult(event_id, False, 0, 0, 0, 0, 0, 0, 0, room_lost=True)
        return TickResult(
            event_id=event_id,
            stale_epoch=code == _STALE_EPOCH,
            admitted=int(reply[1]),
            expired=int(reply[2]),
            active_shoppers=int(reply[3]),
            queue_length=int(reply[4]),
            admitted_through_score=int(reply[5]),
            admitted_total=int(reply[6]),
            highest_epoch=int(reply[7]),
            dropped=int(reply[8]),
            no_shows_total=int(reply[9]),
            claimed_total=int(reply[10]),
            # (A stale epoch's answer is shorter: it changed nothing.)
            sold_out=len(reply) > 11 and bool(int(reply[11])),
        )

    async def record_presence(self, event_id: int, customer_ids: Sequence[str], *, now_ms: int) -> int | None:
        """Each lane's seen set takes the ids it has (ZADD XX): the general
        lane's answer names the room's other lanes, which get the same ids."""
        waiting = 0
        for start in range(0, len(customer_ids), MAX_PRESENCE_BATCH):
            batch = customer_ids[start : start + MAX_PRESENCE_BATCH]
            keys = self.keys(event_id)
            reply = await self._batcher.call(self._presence, (keys.config, keys.seen), (now_ms, *batch))
            if not int(reply[0]):
                return None
            waiting += int(reply[1])
            for lane in filter(None, _text(reply[2]).split(",")):
                lane_keys = self.keys(event_id, lane)
                more = await self._batcher.call(self._presence, (lane_keys.config, lane_keys.seen), (now_ms, *batch))
                waiting += int(more[1])
        return waiting

    async def flag(self, event_id: int, customer_id: str, *, flagged: bool, now_ms: int) -> bool | None:
        keys = self.keys(event_id)
        reply = await self._batcher.call(
            self._flag,
            (keys.config, keys.queue, keys.shadow, keys.shadow_queue, keys.seen, keys.lifecycle),
            (customer_id, int(flagged), now_ms),
        )
        if not int(reply[0]):
            return None
        return bool(int(reply[1]))

    async def progress(self, event_id: int, *, now_ms: int, lane: str = "") -> Progress | None:
        keys = self.keys(event_id, lane)
        reply = await self._batcher.call(self._progress, (*keys.common, keys.generation), ())
        if not int(reply[0]):
            return None
        return Progress(
            event_id=event_id,
            admitted_through_score=_int(reply[1]),
            queue_length=_int(reply[2]),
            active_shoppers=_int(reply[3]),
            admitted_total=_int(reply[4]),
            joined_total=_int(reply[5]),
            pre_queue_joined=_int(reply[6]),
            rate_at_last_tick=_float(reply[7]),
            last_tick_ms=_int(reply[8]),
            opens_at_ms=_int(reply[9]),
            paused=bool(_int(reply[10]) & 1),
            sold_out=bool(_int(reply[10]) & 2),
            observed_at_ms=now_ms,
            target_rate_per_second=_float(reply[11]),
            rate_reason=_reason(reply[12]),
            lane=lane,
            generation=_int(reply[13]),
        )

    async def pre_queue_log(self, event_id: int, *, start: int, count: int, seal: bool) -> PreQueueLog | None:
        keys = self.keys(event_id)
        reply = await self._batcher.call(
            self._pre_queue,
            (keys.config, keys.progress, keys.pre_queue_log, keys.generation),
            (start, count, int(seal)),
        )
        if int(reply[0]) != 1:
            return None
        entries = []
        for raw in reply[3:]:
            pseudonym, score = (raw.decode() if isinstance(raw, bytes) else str(raw)).split(" ")
            entries.append(Entry(pseudonym, int(score)))
        return PreQueueLog(length=int(reply[1]), sealed=bool(int(reply[2])), entries=entries)

    async def lifecycle_log(self, event_id: int, *, count: int) -> LifecycleLog | None:
        keys = self.keys(event_id)
        reply = await self._batcher.call(
            self._lifecycle,
            (keys.config, keys.lifecycle, keys.lifecycle_trimmed, keys.refusals, keys.generation),
            ("read", count, 0, 0),
        )
        if int(reply[0]) == -2:
            # Lost and not rebuilt yet: nothing to copy until it is.
            return LifecycleLog(start=0, entries=[], refusals={})
        if int(reply[0]) != 1:
            return None
        trimmed, length, generation = int(reply[1]), int(reply[2]), int(reply[3])
        raw = reply[4 : 4 + length]
        pairs = reply[4 + length :]
        return LifecycleLog(
            start=(generation - 1) * GENERATION_SPAN + trimmed,
            entries=[item.decode() if isinstance(item, bytes) else str(item) for item in raw],
            refusals={
                (pairs[i].decode() if isinstance(pairs[i], bytes) else str(pairs[i])): int(pairs[i + 1])
                for i in range(0, len(pairs), 2)
            },
        )

    async def trim_lifecycle(self, event_id: int, *, start: int, count: int) -> bool:
        keys = self.keys(event_id)
        reply = await self._batcher.call(
            self._lifecycle,
            (keys.config, keys.lifecycle, keys.lifecycle_trimmed, keys.refusals, keys.generation),
            ("trim", count, start % GENERATION_SPAN, start // GENERATION_SPAN + 1),
        )
        return int(reply[0]) == 1

    async def put_config(self, config: WaitingRoomConfig, *, generation: int = 1) -> bool:
        """Mirrors the room, one configuration per lane (the general lane's
        at the event's keys): each lane's own opening, pre-queue and
        nominal part of the rate, the rest the room's. A room without a
        generation marker gets ``generation`` (0: none)."""
        written = False
        views = config.lane_views()
        names = ",".join(view.name for view in views[1:])
        total = sum(view.weight for view in views) or 1
        for view in views:
            rate = config.admission_rate_per_second
            if config.lanes:
                rate = max(1, round(rate * view.weight / total))
            written |= await self._put_lane(
                config, view.name, view.opens_at_ms, view.pre_queue_opens_at_ms, rate, names, generation
            )
        return written

    async def _put_lane(
        self, config: WaitingRoomConfig, lane: str, opens_ms: int, pre_ms: int, rate: int, names: str, generation: int
    ) -> bool:
        args: list[Arg] = [
            config.version,
            generation,
            "lanes",
            int(bool(config.lanes)),
            "names",
            names,
            "opens",
            opens_ms,
            "pre",
            pre_ms,
            "rate",
            rate,
            "max",
            config.max_active_shoppers,
            "session",
            config.session_length_ms,
            "claim",
            config.claim_grace_ms,
            "ttl",
            config.token_ttl_ms,
            "paused",
            int(config.paused),
            "grace",
            config.presence_grace_ms,
            "safety",
            int(config.safety_net),
        ]
        keys = self.keys(config.event_id, lane)
        reply = await self._batcher.call(self._config_put, (keys.config, keys.generation), args)
        return bool(reply)
