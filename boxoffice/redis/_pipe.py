"""One pipelined connection to Redis: whole batches of commands written at
once, replies parsed by hiredis and handed back per batch, in order.

redis-py spends a few hundred microseconds of Python on every pipeline it
runs (connection checkout, retries, a timeout per reply); for the join path
of a waiting room that is more than the script costs Redis. This connection
does only what a batch needs. It speaks plain TCP with AUTH and SELECT; the
batcher falls back to redis-py pipelines for TLS or Unix sockets.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import hiredis

_log = logging.getLogger("boxoffice.redis")

Arg = str | int | float | bytes


class PipeClosed(ConnectionError):
    """The connection closed before the replies arrived."""


class ReplyError(Exception):
    """An error reply of one command (e.g. NOSCRIPT)."""


def encode_args(args: Sequence[Arg]) -> bytes:
    """RESP bulk strings of ``args``, without the array header."""
    out: list[bytes] = []
    append = out.append
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, int):
            data = b"%d" % arg
        else:
            data = repr(arg).encode()
        append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def pack(commands: Sequence[Sequence[Arg]]) -> bytes:
    """RESP encoding of many commands in one buffer."""
    return b"".join(b"*%d\r\n%s" % (len(command), encode_args(command)) for command in commands)


@dataclass(slots=True)
class _Batch:
    expected: int
    future: asyncio.Future[list[Any]]
    replies: list[Any] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self._reader = hiredis.Reader(replyError=ReplyError)
        self._batches: collections.deque[_Batch] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not a subclass of asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        batches = self._batches
        while batches:
            reply = self._reader.gets()
            if reply is False:
                return
            head = batches[0]
            head.replies.append(reply)
            if len(head.replies) == head.expected:
                batches.popleft()
                if head.timer is not None:
                    head.timer.cancel()
                if not head.future.done():
                    head.future.set_result(head.replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        error = PipeClosed(f"redis connection lost: {exc}" if exc else "redis connection closed")
        while self._batches:
            batch = self._batches.popleft()
            if batch.timer is not None:
                batch.timer.cancel()
            if not batch.future.done():
                batch.future.set_exception(error)

    def send(self, payload: bytes, expected: int, timeout_seconds: float) -> asyncio.Future[list[Any]]:
        loop = asyncio.get_running_loop()
        batch = _Batch(expected, loop.create_future())
        if self.closed or self.transport is None:
            batch.future.set_exception(PipeClosed("redis connection closed"))
            return batch.future
        # A Redis that stops answering must not hold the batch forever:
        # close the connection, which fails every batch on it.
        batch.timer = loop.call_later(timeout_seconds, self._stalled)
        self._batches.append(batch)
        self.transport.write(payload)
        return batch.future

    def _stalled(self) -> None:
        _log.warning("redis did not answer in time; reconnecting")
        if self.transport is not None:
            self.transport.abort()


class PipelinedConnection:
    """A lazily (re)connected pipelining connection."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        timeout_seconds: float = 5.0,
    ) -> None:
        self._host = host
        self._port = port
        self._db = db
        self._username = username
        self._password = password
        self._timeout = timeout_seconds
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    async def _connected(self) -> _Protocol:
        protocol = self._protocol
        if protocol is not None and not protocol.closed:
            return protocol
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            protocol = self._protocol
            if protocol is not None and not protocol.closed:
                return protocol
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(self._timeout):
                _, protocol = await loop.create_connection(_Protocol, self._host, self._port)
                hello: list[list[Arg]] = []
                if self._password is not None:
                    hello.append(
                        ["AUTH", self._username, self._password] if self._username else ["AUTH", self._password]
                    )
                if self._db:
                    hello.append(["SELECT", self._db])
                if hello:
                    replies = await protocol.send(pack(hello), len(hello), self._timeout)
                    for reply in replies:
                        if isinstance(reply, ReplyError):
                            if protocol.transport is not None:
                                protocol.transport.close()
                            raise PipeClosed(f"redis refused the connection: {reply}")
            self._protocol = protocol
            return protocol

    def send_nowait(self, payload: bytes, count: int) -> asyncio.Future[list[Any]] | None:
        """Write ``count`` commands already encoded in ``payload`` now if
        connected; the future of their replies (as ``execute``), or None
        when a connection must be made first."""
        protocol = self._protocol
        if protocol is None or protocol.closed:
            return None
        return protocol.send(payload, count, self._timeout)

    async def execute(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """The replies of ``commands``, in order; an error reply is a
        ReplyError in its place. Raises PipeClosed or OSError when the
        connection fails."""
        protocol = await self._connected()
        return await protocol.send(pack(commands), len(commands), self._timeout)

    async def close(self) -> None:
        protocol = self._protocol
        self._protocol = None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
