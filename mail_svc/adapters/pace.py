"""The relay's rate, shared by every mailer: each message reserves its moment
in Redis before it is handed over (``mail_svc/lua/pace.lua``)."""

from __future__ import annotations

import asyncio
from email.message import Message

from redis.exceptions import RedisError

from boxoffice.clock import Clock
from boxoffice.redis import RedisClient, Script, load_script
from mail_svc.ports import Relay, RelayBusy


class SharedPace:
    """At most ``per_second`` messages a second handed to ``relay`` by all
    the mailers together (a burst of one second's worth, then one every
    1/``per_second`` s): a crowd's bookings queue here rather than get the
    relay to block the sender. The relay's pace lives in Redis under its
    name; a pace that cannot be read is a "try later" (the entry stays
    pending)."""

    def __init__(self, relay: Relay, redis: RedisClient, per_second: float, clock: Clock) -> None:
        self._relay = relay
        self.name = relay.name
        self._redis = redis
        self._clock = clock
        self._interval_us = round(1_000_000 / per_second)
        self._burst = max(1, int(per_second))
        self._key = f"mail:pace:{{{relay.name}}}"
        self._script: Script = load_script("mail_svc", "pace")

    async def send(self, message: Message, recipient: str) -> None:
        try:
            wait_us = await self._script.run(
                self._redis, [self._key], [round(self._clock.now() * 1_000_000), self._interval_us, self._burst]
            )
        except (RedisError, OSError) as err:
            raise RelayBusy(f"the relay's pace cannot be read: {type(err).__name__}") from None
        if int(wait_us) > 0:
            await asyncio.sleep(int(wait_us) / 1_000_000)
        await self._relay.send(message, recipient)

    async def close(self) -> None:
        await self._relay.close()
