"""Concurrent requests' Redis scripts sent together in pipelines.

One Python process makes about four times as many Redis calls a second
pipelined as one by one. Every script call joins the batch being gathered;
the batch goes out as one pipeline of EVALSHA commands as soon as the event
loop is free, or as soon as one of the pipelines in flight returns (under
load, batches grow while Redis answers the previous one, and a busy
process lingers up to 3 ms before sending: a few more calls per pipeline
save more CPU than the wait costs). A caller waits for its own reply only
as long as its deadline allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection
from redis.exceptions import (
    ClusterDownError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)

from boxoffice import deadline
from boxoffice.errors import DeadlineExceeded, Internal, Unavailable
from boxoffice.redis._client import RedisClient, slot_of
from boxoffice.redis._pipe import Arg, PipeClosed, PipelinedConnection, ReplyError, encode_args
from boxoffice.redis._scripts import Script

_log = logging.getLogger("boxoffice.redis")

# A batch sent less than this long ago means the process is busy: the next
# one lingers (linger_seconds) to gather more calls. An idle process sends at
# once.
_BUSY_SECONDS = 0.005


@dataclass(slots=True)
class _Call:
    script: Script
    keys: Sequence[str]
    args: Sequence[Arg]
    future: asyncio.Future[Any]
    # The RESP encoding of "EVALSHA sha numkeys keys..." (shared by calls
    # of one script on one event's keys).
    head: bytes

    def command(self) -> list[Arg]:
        return ["EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args]

    def encoded(self) -> bytes:
        return b"*%d\r\n%s%s" % (3 + len(self.keys) + len(self.args), self.head, encode_args(self.args))


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(DeadlineExceeded("deadline exceeded", reason="DEADLINE_EXCEEDED"))


def _unavailable(err: BaseException) -> Unavailable:
    return Unavailable(f"redis unavailable: {type(err).__name__}", reason="REDIS_UNAVAILABLE")


def _pipe_for(client: aioredis.Redis, timeout_seconds: float) -> PipelinedConnection | None:
    """A pipelining connection with the client's settings, when it connects
    over plain TCP (TLS and Unix sockets go through redis-py)."""
    pool = client.connection_pool
    if pool.connection_class is not Connection:
        return None
    kwargs = pool.connection_kwargs
    return PipelinedConnection(
        host=str(kwargs.get("host", "localhost")),
        port=int(kwargs.get("port", 6379)),
        db=int(kwargs.get("db", 0) or 0),
        username=kwargs.get("username"),
        password=kwargs.get("password"),
        timeout_seconds=float(kwargs.get("socket_timeout") or timeout_seconds),
    )


def _node_pipe(cluster: RedisCluster, node: ClusterNode, timeout_seconds: float) -> PipelinedConnection | None:
    """A pipelining connection to one cluster node, with the cluster
    client's credentials (None over TLS: redis-py routes those)."""
    kwargs = cluster.connection_kwargs
    if kwargs.get("connection_class", Connection) is not Connection:
        return None
    return PipelinedConnection(
        host=node.host,
        port=int(node.port),
        username=kwargs.get("username"),
        password=kwargs.get("password"),
        timeout_seconds=float(kwargs.get("socket_timeout") or timeout_seconds),
    )


# What a call that cannot reach Redis raises (a cluster client's own
# errors included: no node for a slot, a cluster that is down).
_FAILURES = (PipeClosed, RedisError, RedisClusterException, OSError, TimeoutError)

# Error replies of a cluster node that mean "not here (now)": the slot map
# changed (a failover, a resharding) or the cluster is electing.
_REROUTE = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")

# The slot map is re-read at most this often after a node failed or
# redirected a call.
_REFRESH_SECONDS = 0.5


class ScriptBatcher:
    """Runs scripts for concurrent callers in shared pipelines.

    On a Redis Cluster each primary has its own lane (a pipelined
    connection, its batch being gathered, its pipelines in flight): a call
    goes to the lane of the primary that holds its keys' slot (one event's
    keys share one slot), so a pipeline never mixes nodes, and a node that
    is down or failing over fails and delays only its own events' calls.
    A redirected call (MOVED, ASK) is sent again through redis-py's cluster
    client, which follows the redirection, and the slot map is re-read.

    A component: ``stop`` waits for the pipelines in flight.
    """

    def __init__(
        self,
        client: RedisClient,
        *,
        max_batch: int = 1000,
        max_in_flight: int = 1,
        linger_seconds: float = 0.003,
        timeout_seconds: float = 5.0,
        name: str = "redis-script-batcher",
    ) -> None:
        self.name = name
        self._client = client
        self._cluster = client if isinstance(client, RedisCluster) else None
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._linger = linger_seconds
        self._timeout = timeout_seconds
        self._heads: dict[tuple[str, tuple[str, ...]], bytes] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # One lane without a cluster; with one, a lane per primary (by node
        # name) and the routed lane ("") for calls whose node is not known yet.
        self._single = None if isinstance(client, RedisCluster) else _Lane(self, _pipe_for(client, timeout_seconds))
        self._lanes: dict[str, _Lane] = {}
        self._refreshed_at = float("-inf")
        self._refreshing = False
        # Pipelines sent and scripts carried, for tests and benchmarks.
        self.pipelines_sent = 0
        self.calls_sent = 0

    async def start(self) -> None:
        return None

    async def stop(self, grace_seconds: float) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=max(grace_seconds, 0.1))
        lanes = [*self._lanes.values(), *([self._single] if self._single is not None else [])]
        for lane in lanes:
            if lane.pipe is not None:
                await lane.pipe.close()

    async def call(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """The script's reply; UNAVAILABLE when Redis is unreachable,
        DEADLINE_EXCEEDED when the caller's deadline passes first."""
        budget = deadline.remaining()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        known = (script.sha, tuple(keys))
        head = self._heads.get(known)
        if head is None:
            if len(self._heads) > 10_000:
                self._heads.clear()
            head = self._heads[known] = encode_args(["EVALSHA", script.sha, len(keys), *keys])
        lane = self._single or self._lane_for(keys)
        lane.add(_Call(script, keys, args, future, head), loop)
        # The deadline bounds the wait (as deadline.bounded() does, with one
        # timer and no context manager: this is every request's path).
        expiry = loop.call_at(loop.time() + budget, _expire, future)
        try:
            return await future
        finally:
            expiry.cancel()

    def _lane_for(self, keys: Sequence[str]) -> _Lane:
        cluster = self._cluster
        assert cluster is not None
        name = ""
        node: ClusterNode | None = None
        if keys:
            try:
                node = cluster.nodes_manager.get_node_from_slot(slot_of(keys[0]))
                name = node.name
            except (SlotNotCoveredError, KeyError, IndexError, TypeError):
                self.refresh_soon()  # not connected yet, or a slot uncovered
        lane = self._lanes.get(name)
        if lane is None:
            pipe = None if node is None else _node_pipe(cluster, node, self._timeout)
            lane = self._lanes[name] = _Lane(self, pipe)
        return lane

    def refresh_soon(self) -> None:
        """Re-read the cluster's slot map (at most every half second)."""
        cluster = self._cluster
        if cluster is None or self._refreshing:
            return
        loop = asyncio.get_running_loop()
        if loop.time() - self._refreshed_at < _REFRESH_SECONDS:
            return
        self._refreshing = True
        self._refreshed_at = loop.time()
        self._spawn(self._refresh(cluster))

    async def _refresh(self, cluster: RedisCluster) -> None:
        try:
            with contextlib.suppress(*_FAILURES):
                async with asyncio.timeout(self._timeout):
                    await cluster.nodes_manager.initialize()
        finally:
            self._refreshing = False

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _routed(self, calls: list[_Call]) -> list[Any]:
        """The replies of ``calls`` through redis-py's client (which finds
        each call's node and follows redirections), loading scripts a node
        lacks."""
        replies = await self._execute_routed([call.command() for call in calls])
        missing = [call for call, reply in zip(calls, replies, strict=True) if _no_script(reply)]
        if missing:
            for script in {call.script.sha: call.script for call in missing}.values():
                await self._client.script_load(script.source)
            retried = iter(await self._execute_routed([call.command() for call in missing]))
            replies = [next(retried) if _no_script(reply) else reply for reply in replies]
        return replies

    async def _execute_routed(self, commands: list[list[Arg]]) -> list[Any]:
        self.pipelines_sent += 1
        self.calls_sent += len(commands)
        pipe = self._client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        replies = await pipe.execute(raise_on_error=False)
        return [_reply(reply) for reply in replies]


class _Lane:
    """One node's batch being gathered and pipelines in flight."""

    __slots__ = ("_batcher", "_in_flight", "_last_flush", "_pending", "_scheduled", "pipe")

    def __init__(self, batcher: ScriptBatcher, pipe: PipelinedConnection | None) -> None:
        self._batcher = batcher
        self.pipe = pipe
        self._pending: list[_Call] = []
        self._in_flight = 0
        self._scheduled = False
        self._last_flush = 0.0

    def add(self, call: _Call, loop: asyncio.AbstractEventLoop) -> None:
        self._pending.append(call)
        batcher = self._batcher
        if not self._scheduled and self._in_flight < batcher._max_in_flight:
            self._scheduled = True
            if batcher._linger and loop.time() - self._last_flush < _BUSY_SECONDS:
                # Busy: wait a little so that the next pipeline carries more.
                loop.call_later(batcher._linger, self._flush)
            else:
                loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        self._last_flush = asyncio.get_running_loop().time()
        batcher = self._batcher
        while self._pending and self._in_flight < batcher._max_in_flight:
            batch = self._pending[: batcher._max_batch]
            del self._pending[: batcher._max_batch]
            self._in_flight += 1
            # The common case writes at once and resolves from the reply
            # callback; connecting, redis-py, NOSCRIPT and redirections take
            # a task.
            replies = (
                None
                if self.pipe is None
                else self.pipe.send_nowait(b"".join([call.encoded() for call in batch]), len(batch))
            )
            if replies is not None:
                batcher.pipelines_sent += 1
                batcher.calls_sent += len(batch)
                replies.add_done_callback(functools.partial(self._replied, batch))
            else:
                batcher._spawn(self._send(batch)).add_done_callback(self._sent)

    def _replied(self, batch: list[_Call], replies: asyncio.Future[list[Any]]) -> None:
        error = replies.exception()
        if error is not None:
            for call in batch:
                _fail(call, _unavailable(error))
            self._batcher.refresh_soon()
        elif any(_no_script(reply) or _rerouted(reply) for reply in replies.result()):
            self._batcher._spawn(self._send(batch, replies.result())).add_done_callback(self._sent)
            return  # the task releases the slot
        else:
            _resolve(batch, replies.result())
        self._release()

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._release()

    def _release(self) -> None:
        self._in_flight -= 1
        if self._pending and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def _send(self, batch: list[_Call], replies: list[Any] | None = None) -> None:
        """Send ``batch`` (unless its ``replies`` came already) and resolve
        it, first sending again the calls that found no script (loading it)
        or were redirected."""
        try:
            if replies is None:
                replies = await self._execute([call.command() for call in batch])
            missing = [call for call, reply in zip(batch, replies, strict=True) if _no_script(reply)]
            if missing and self.pipe is None:
                # Sent through redis-py: its client loads the scripts where needed.
                retried = iter(await self._batcher._routed(missing))
                replies = [next(retried) if _no_script(reply) else reply for reply in replies]
            elif missing:
                # A restarted or failed-over Redis has lost its script cache.
                scripts = {call.script.sha: call.script for call in missing}.values()
                await self._execute([["SCRIPT", "LOAD", script.source] for script in scripts])
                retried = iter(await self._execute([call.command() for call in missing]))
                replies = [next(retried) if _no_script(reply) else reply for reply in replies]
            moved = [call for call, reply in zip(batch, replies, strict=True) if _rerouted(reply)]
            if moved:
                # The slot has another primary now (or is being failed over).
                self._batcher.refresh_soon()
                rerouted = iter(await self._batcher._routed(moved))
                replies = [next(rerouted) if _rerouted(reply) else reply for reply in replies]
        except asyncio.CancelledError:
            for call in batch:
                _fail(call, Unavailable("redis call cancelled", reason="REDIS_UNAVAILABLE"))
            raise
        except _FAILURES as err:
            for call in batch:
                _fail(call, _unavailable(err))
            self._batcher.refresh_soon()
            return
        _resolve(batch, replies)

    async def _execute(self, commands: list[list[Arg]]) -> list[Any]:
        if self.pipe is None:
            return await self._batcher._execute_routed(commands)
        self._batcher.pipelines_sent += 1
        self._batcher.calls_sent += len(commands)
        return await self.pipe.execute(commands)


def _reply(reply: Any) -> Any:
    """redis-py's error reply as the pipelined connection's (redis-py drops
    the NOSCRIPT code from the message of the error it maps it to)."""
    for error, code in _CODES:
        if isinstance(reply, error):
            return ReplyError(f"{code} {reply}")
    return ReplyError(str(reply)) if isinstance(reply, ResponseError) else reply


# The error classes redis-py maps these codes to (dropping the code).
_CODES: tuple[tuple[type[ResponseError], str], ...] = (
    (NoScriptError, "NOSCRIPT"),
    (ClusterDownError, "CLUSTERDOWN"),
    (TryAgainError, "TRYAGAIN"),
)


def _rerouted(reply: Any) -> bool:
    return isinstance(reply, ReplyError) and str(reply).startswith(_REROUTE)


def _resolve(batch: list[_Call], replies: list[Any]) -> None:
    for call, reply in zip(batch, replies, strict=True):
        if _rerouted(reply):
            # Still redirected, or the cluster is electing: not there now.
            _fail(call, Unavailable(f"redis unavailable: {str(reply).split(' ', 1)[0]}", reason="REDIS_UNAVAILABLE"))
        elif isinstance(reply, ReplyError):
            _log.error("redis script failed: %s", reply, extra={"script": call.script.name, "error": str(reply)})
            _fail(call, Internal("redis script failed", reason="REDIS_ERROR"))
        elif not call.future.done():
            call.future.set_result(reply)


def _no_script(reply: Any) -> bool:
    return isinstance(reply, ReplyError) and str(reply).startswith("NOSCRIPT")


def _fail(call: _Call, err: Exception) -> None:
    if not call.future.done():
        call.future.set_exception(err)
