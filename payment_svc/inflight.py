"""Charges in flight: payments whose charge's outcome this process does not
know yet (the provider did not answer in time, or said it is still
processing). The handler notes them; the reconciler asks the provider about
each at once and then again at growing intervals until it knows, instead of
waiting for its next pass. A payment noted by another replica, or after a
restart, is still the reconciler's next pass's: this is the fast path only.
"""

from __future__ import annotations

import asyncio

# Payments watched at most (past it, a new one waits for the next pass).
_MAX_WATCHED = 10_000


class ChargesInFlight:
    """The payments to ask the provider about, each with when to ask next."""

    def __init__(self, *, first_seconds: float, longest_seconds: float) -> None:
        self._first = first_seconds
        self._longest = longest_seconds
        # payment id -> (when to ask next, loop time; the wait after that)
        self._due: dict[str, tuple[float, float]] = {}
        self._noted = asyncio.Event()

    def note(self, payment_id: str) -> None:
        """Ask the provider about ``payment_id`` at once."""
        if payment_id in self._due or len(self._due) >= _MAX_WATCHED:
            return
        self._due[payment_id] = (asyncio.get_running_loop().time(), self._first)
        self._noted.set()

    def due(self) -> list[str]:
        """The payments to ask about now."""
        now = asyncio.get_running_loop().time()
        return [payment_id for payment_id, (at, _) in self._due.items() if at <= now]

    def later(self, payment_id: str) -> None:
        """Not known yet: ask again after a longer wait."""
        if payment_id not in self._due:
            return
        _, wait = self._due[payment_id]
        self._due[payment_id] = (asyncio.get_running_loop().time() + wait, min(wait * 2, self._longest))

    def known(self, payment_id: str) -> None:
        """Its outcome is known: no more asking."""
        self._due.pop(payment_id, None)

    def __len__(self) -> int:
        return len(self._due)

    async def wait(self, seconds: float) -> None:
        """Until a payment is noted or falls due, or ``seconds`` pass."""
        loop = asyncio.get_running_loop()
        earliest = min((at for at, _ in self._due.values()), default=loop.time() + seconds)
        timeout = max(0.0, min(seconds, earliest - loop.time()))
        self._noted.clear()
        try:
            async with asyncio.timeout(timeout):
                await self._noted.wait()
        except TimeoutError:
            return
