"""The Redis side of a waiting room's rebuild (``rebuild.RoomImageStore``):
one script (``lua/rebuild.lua``) whose writes stop once the room's
generation marker is back, in chunks so that no call holds Redis long."""

from __future__ import annotations

from collections.abc import Sequence

from boxoffice.redis import Arg, ScriptBatcher, load_script
from queue_svc.adapters.redis_queue_store import EventKeys
from queue_svc.rebuild import RoomImage

# Members (or pairs) per script call.
CHUNK = 1000


class RedisRoomImages:
    """Reads a room's marker and writes a rebuilt room."""

    def __init__(self, batcher: ScriptBatcher) -> None:
        self._batcher = batcher
        self._script = load_script("queue_svc", "rebuild")

    async def _call(self, keys: Sequence[str], args: Sequence[Arg]) -> int:
        return int(await self._batcher.call(self._script, keys, args))

    async def marker(self, event_id: int) -> tuple[int, bool]:
        keys = EventKeys.of(event_id)
        reply = await self._batcher.call(
            self._script,
            (keys.generation, keys.queue, keys.admitted, keys.active, keys.sequence, keys.progress),
            ("state",),
        )
        return int(reply[0]), bool(int(reply[1]))

    async def wipe(self, event_id: int, lanes: Sequence[str]) -> None:
        general = EventKeys.of(event_id)
        doomed = {
            general.generation,
            general.pre_queue_log,
            general.refusals,
            general.admitted,
            general.active,
            general.outcomes,
            general.shadow,
            general.shadow_queue,
            general.lanes,
            general.lifecycle,
            general.lifecycle_trimmed,
        }
        for lane in lanes:
            keys = EventKeys.of(event_id, lane)
            doomed |= {keys.queue, keys.progress, keys.seen, keys.sequence}
        await self._call((general.generation, *sorted(doomed - {general.generation})), ("wipe",))

    async def _chunks(self, marker: str, key: str, op: str, items: Sequence[Arg]) -> bool:
        """``items`` (flat: pairs stay whole) in chunks; False once refused."""
        step = 2 * CHUNK if op in ("zadd", "hset") else CHUNK
        for start in range(0, len(items), step):
            if not await self._call((marker, key), (op, *items[start : start + step])):
                return False
        return True

    async def restore(self, event_id: int, image: RoomImage) -> bool:
        general = EventKeys.of(event_id)
        marker = general.generation

        def pairs(members: Sequence[tuple[int, str]]) -> list[Arg]:
            return [item for score, customer in members for item in (score, customer)]

        # The cap first: the admitted and active sets, then the rest.
        writes: list[tuple[str, str, list[Arg]]] = [
            (general.admitted, "zadd", pairs(image.admitted)),
            (general.active, "zadd", pairs(image.active)),
            (general.shadow_queue, "zadd", pairs(image.shadowed)),
            (general.shadow, "sadd", [*(customer for _, customer in image.shadowed), *image.flagged]),
            (general.outcomes, "hset", [item for pair in image.outcomes.items() for item in pair]),
            (general.lanes, "hset", [item for pair in image.bindings.items() for item in pair]),
        ]
        for lane, part in image.lanes.items():
            keys = EventKeys.of(event_id, lane)
            writes.append((keys.queue, "zadd", pairs(part.waiting)))
            # Seen now: each rebuilt waiter has the whole presence grace again.
            writes.append(
                (keys.seen, "zadd", [item for _, customer in part.waiting for item in (image.at_ms, customer)])
            )
            writes.append((keys.progress, "hset", [item for pair in part.progress.items() for item in pair]))
            if not await self._call((marker, keys.sequence), ("seq", part.sequence)):
                return False
        if image.pre_queue_sealed:
            writes.append((general.progress, "hset", ["sealed", 1]))
        for key, op, items in writes:
            if items and not await self._chunks(marker, key, op, items):
                return False
        return True

    async def append_pre_queue(self, event_id: int, entries: Sequence[str]) -> bool:
        keys = EventKeys.of(event_id)
        return await self._chunks(keys.generation, keys.pre_queue_log, "rpush", list(entries))

    async def mark(self, event_id: int, generation: int, *, refusals: dict[str, int] | None = None) -> None:
        keys = EventKeys.of(event_id)
        counts = [item for pair in (refusals or {}).items() for item in pair]
        await self._call((keys.generation, keys.refusals), ("mark", generation, *counts))
