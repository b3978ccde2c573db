"""Public, cacheable documents (the event, the seat map, the progress
document): one load per key per max age whatever the number of callers,
an ETag, ``Cache-Control: public`` with ``stale-while-revalidate`` so that
a CDN in front answers the polling of a million pages.

A shared load runs on its own deadline (the edge's request limit), not on
the first caller's: one caller with a short deadline never fails the
others, each of whom waits only as long as its own deadline allows.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

from starlette.responses import Response

from boxoffice import deadline
from edge_svc.http import Ctx


class Prepared(Response):
    """An answer whose head was made beforehand: the status, the body and
    the raw headers as Starlette's Response made them once (copied, so that
    a request can add its own)."""

    def __init__(self, status_code: int, body: bytes, raw_headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = status_code
        self.background = None
        self.body = body
        self.raw_headers = list(raw_headers)


@dataclass(frozen=True, slots=True)
class PreparedDocument:
    """A public document's two answers (200 and 304), made once."""

    body: bytes
    etag: str
    ok: list[tuple[bytes, bytes]]
    not_modified: list[tuple[bytes, bytes]]

    def answer(self, ctx: Ctx) -> Response:
        if _matches(ctx, self.etag):
            return Prepared(304, b"", self.not_modified)
        return Prepared(200, self.body, self.ok)


@dataclass(frozen=True, slots=True)
class _Entry:
    # The document's answers, made once at its load for every caller.
    document: PreparedDocument
    loaded_at: float


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


class PublicCache:
    """Documents by key, each fresh for ``max_age_seconds``."""

    def __init__(
        self,
        *,
        max_age_seconds: int,
        load_timeout_seconds: float,
        capacity: int = 10_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_age = max_age_seconds
        self._load_timeout = load_timeout_seconds
        self._capacity = capacity
        self._monotonic = monotonic
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._loading: dict[Hashable, asyncio.Task[_Entry]] = {}

    async def answer(self, ctx: Ctx, key: Hashable, load: Callable[[], Awaitable[bytes]]) -> Response:
        return (await self._entry(key, load)).document.answer(ctx)

    async def document(self, key: Hashable, load: Callable[[], Awaitable[bytes]]) -> bytes:
        """The document itself (loaded as :meth:`answer` loads it), for
        checking a request against it (a seat map's section against its
        event's) without asking the backend again."""
        return (await self._entry(key, load)).document.body

    async def _entry(self, key: Hashable, load: Callable[[], Awaitable[bytes]]) -> _Entry:
        entry = self._entries.get(key)
        if entry is None or self._monotonic() - entry.loaded_at >= max(self._max_age, 0.001):
            entry = await self._shared(key, load)
        return entry

    async def _shared(self, key: Hashable, load: Callable[[], Awaitable[bytes]]) -> _Entry:
        task = self._loading.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(key, load))
            self._loading[key] = task
            task.add_done_callback(lambda done: self._loaded(key, done))
        # Each caller waits as long as its own deadline allows.
        async with deadline.bounded():
            return await asyncio.shield(task)

    def _loaded(self, key: Hashable, task: asyncio.Task[_Entry]) -> None:
        self._loading.pop(key, None)
        # A load whose callers all stopped waiting (their deadlines) failed
        # for nobody: its error is taken here, not logged as never retrieved;
        # the next caller loads again.
        if not task.cancelled():
            task.exception()

    async def _load(self, key: Hashable, load: Callable[[], Awaitable[bytes]]) -> _Entry:
        # Detached from the first caller's deadline: the load has its own.
        with deadline.detached(self._load_timeout):
            body = await load()
        entry = _Entry(self.prepare(body, etag_of(body), self._max_age), self._monotonic())
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return entry

    def fresh(self, ctx: Ctx, body: bytes, max_age: int) -> Response:
        """A public document computed now (no load to share)."""
        return self.respond(ctx, body, etag_of(body), max_age)

    @staticmethod
    def respond(ctx: Ctx, body: bytes, etag: str, max_age: int) -> Response:
        headers = _headers(etag, max_age)
        if _matches(ctx, etag):
            return Response(status_code=304, headers=headers)
        return Response(body, media_type="application/json", headers=headers)

    @staticmethod
    def prepare(body: bytes, etag: str, max_age: int) -> PreparedDocument:
        """The document's answers, made once for every request that asks
        (the same bytes :meth:`respond` answers)."""
        headers = _headers(etag, max_age)
        ok = Response(body, media_type="application/json", headers=headers).raw_headers
        return PreparedDocument(body, etag, ok, Response(status_code=304, headers=headers).raw_headers)


def _headers(etag: str, max_age: int) -> dict[str, str]:
    return {
        "cache-control": f"public, max-age={max_age}, stale-while-revalidate={max(10, 5 * max_age)}",
        "etag": etag,
    }


def _matches(ctx: Ctx, etag: str) -> bool:
    given = ctx.if_none_match
    return given is not None and etag in [tag.strip() for tag in given.split(",")]
