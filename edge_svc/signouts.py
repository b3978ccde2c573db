"""Signed-out session cookies, remembered in Redis until they would have
expired, so that a cookie stops working the moment its fan signs out (on
every edge process), not when its 12 hours end. A cookie is known by a
hash of it (never the cookie itself).

A check Redis cannot answer within the limits' timeout lets the cookie
through (counted in ``boxoffice_edge_rate_limit_unavailable``), as the
limits do: a signed cookie is still a genuine one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Protocol

from boxoffice import deadline
from boxoffice.errors import BoxofficeError
from boxoffice.redis import Script, ScriptBatcher, load_script


class SignOuts(Protocol):
    async def record(self, cookie: str, *, seconds_left: float) -> None:
        """Remembers ``cookie`` as signed out for ``seconds_left``."""

    async def signed_out(self, cookie: str) -> bool:
        """Whether ``cookie`` was signed out."""


class RedisSignOuts:
    def __init__(
        self,
        batcher: ScriptBatcher,
        *,
        timeout_seconds: float = 0.25,
        on_unavailable: Callable[[], None] | None = None,
    ) -> None:
        self._batcher = batcher
        self._timeout_seconds = timeout_seconds
        self._on_unavailable = on_unavailable
        self._record: Script = load_script("edge_svc", "signout")
        self._check: Script = load_script("edge_svc", "signedout")

    async def record(self, cookie: str, *, seconds_left: float) -> None:
        # Recorded on the request's own deadline: a sign-out that Redis
        # did not take is an error the fan sees (and can repeat).
        await self._batcher.call(self._record, [_key(cookie)], [max(1, int(seconds_left * 1000))])

    async def signed_out(self, cookie: str) -> bool:
        try:
            with deadline.scope(self._timeout_seconds):
                return bool(int(await self._batcher.call(self._check, [_key(cookie)], [])))
        except BoxofficeError:
            if self._on_unavailable is not None:
                self._on_unavailable()
            return False


def _key(cookie: str) -> str:
    return f"edge:signedout:{{{hashlib.sha256(cookie.encode()).hexdigest()[:40]}}}"
