"""The relay's pace in Redis, shared by every mailer: a second's worth of
messages at once, then one every 1/rate s, whichever mailer sends; a pace
that cannot be read is a "try later"."""

from __future__ import annotations

import asyncio
import secrets
from email.message import Message

import pytest
import redis.asyncio as aioredis

from mail_svc.adapters.pace import SharedPace
from mail_svc.ports import RelayBusy
from tests.support import ManualClock


class _Relay:
    def __init__(self, name: str) -> None:
        self.name = name
        self.sent: list[float] = []
        self._loop_time = asyncio.get_running_loop().time

    async def send(self, message: Message, recipient: str) -> None:
        self.sent.append(self._loop_time())

    async def close(self) -> None:
        return None


async def test_two_mailers_share_one_pace_a_burst_then_evenly(
    redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"relay-{secrets.token_hex(4)}:587"
    clock = ManualClock()
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    relays = [_Relay(name), _Relay(name)]
    paces = [SharedPace(relay, redis, 10.0, clock) for relay in relays]
    monkeypatch.setattr("mail_svc.adapters.pace.asyncio.sleep", no_sleep)
    # 25 messages at one instant, alternately from either mailer.
    for n in range(25):
        await paces[n % 2].send(Message(), "fan@example.test")
    assert sum(len(r.sent) for r in relays) == 25
    # The first ten (a second's worth) at once; then 0.1 s apart, in order.
    assert len(waits) == 15
    assert waits == pytest.approx([0.1 * (k + 1) for k in range(15)], abs=1e-6)
    # A second later the reservations have moved on: the next waits less.
    clock.advance(1.0)
    await paces[0].send(Message(), "fan@example.test")
    assert waits[-1] == pytest.approx(0.6, abs=1e-6)


async def test_a_pace_redis_cannot_answer_is_try_later() -> None:
    gone = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    pace = SharedPace(_Relay("relay.example:587"), gone, 10.0, ManualClock())
    try:
        with pytest.raises(RelayBusy):
            await pace.send(Message(), "fan@example.test")
    finally:
        await gone.aclose()
