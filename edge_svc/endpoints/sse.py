"""A fan's place as Server-Sent Events, from the event's one progress stream.

The stream starts with a ``retry:`` hint, then sends ``event: position``
whenever the fan's state, place or the room's state changes, a comment line
as a heartbeat when nothing changed for a while (so that proxies keep the
connection), and ends with ``event: final`` once the fan is admitted (the
access token, for a bearer client; a browser then reads its position, which
sets the HttpOnly token cookie), leaves the queue some other way, or the
event sells out (the fan still WAITING, admission state SOLD_OUT: nobody
will be admitted; the page offers the waiting list). Each
event's id says what it showed; a reconnect with ``Last-Event-ID`` gets no
repeat of what it already has. When the edge drains, every stream ends with
``event: reconnect`` and a short retry, and the browser reconnects to
another replica by itself.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Send

from boxoffice import deadline, lifecycle
from boxoffice.errors import BoxofficeError
from edge_svc import errors
from edge_svc.endpoints.common import EdgeDeps, to_json
from edge_svc.http import PRIVATE, Ctx, attrs
from edge_svc.identity import Session
from edge_svc.progress import Watch
from edge_svc.streamslots import Lease
from edge_svc.waiting import FINAL_STATES, WAITING, Place, PositionJson, PositionTemplates, estimated, shown_to
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb

_log = logging.getLogger("boxoffice.edge.sse")

# How long a stream may take to fetch the token of an admitted fan.
_CLAIM_SECONDS = 5.0
# The room's state that ends a waiting fan's stream.
_SOLD_OUT = queue_pb.ADMISSION_STATE_SOLD_OUT

Claim = Callable[[Ctx, int, str], Awaitable[queue_pb.QueuePosition]]


class Positions(Protocol):
    """What the stream needs of the queue's endpoints."""

    async def position(self, ctx: Ctx, event_id: int, session: Session) -> queue_pb.QueuePosition: ...

    def place(self, ctx: Ctx, event_id: int, customer: str) -> Place | None: ...


def event_id_of_position(position: queue_pb.QueuePosition) -> str:
    return f"{position.state}.{position.ahead}.{position.admission_state}"


class EventStream(StreamingResponse):
    """A StreamingResponse that keeps neither its head once sent nor its
    last event while it waits for the next: a stream lasts for minutes, and
    20,000 of them hold that memory the whole time."""

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        # Emptied in place: the response's header view shares the list.
        self.raw_headers.clear()
        events = self.body_iterator
        try:
            async for chunk in events:
                body = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                # Not kept while the stream waits for its next event.
                del chunk, body
        finally:
            # A fan gone while an event was being sent leaves the events at
            # their yield: closed here, so the watch, presence and the gauge
            # let go now.
            await lifecycle.close_here(events)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class PositionStream:
    def __init__(self, deps: EdgeDeps, claim: Claim) -> None:
        self._d = deps
        self._claim = claim
        self._templates = PositionTemplates()

    async def open(self, ctx: Ctx, event_id: int, session: Session, positions: Positions) -> Response:
        if self._d.state.draining:
            raise errors.draining()
        # A slot of the address's and of the account's (429 past either limit).
        slots = self._d.stream_slots
        lease = None if slots is None else await slots.take(ctx.client_ip, session.customer_id)
        try:
            return await self._open(ctx, event_id, session, positions, lease)
        except BaseException:
            if lease is not None:
                lease.release()
            raise

    async def _open(
        self, ctx: Ctx, event_id: int, session: Session, positions: Positions, lease: Lease | None
    ) -> Response:
        # The first answer is computed before the stream starts, so that an
        # unknown event or a fan who is not queued gets a plain HTTP error.
        first = await positions.position(ctx, event_id, session)
        heartbeat = self._d.config.sse_heartbeat_seconds
        place = positions.place(ctx, event_id, session.customer_id)
        lane = "" if place is None else place.lane
        over = first.state in FINAL_STATES or first.admission_state == _SOLD_OUT
        watch = None if over else self._d.hub.watch(event_id, heartbeat_seconds=heartbeat, lane=lane)
        last_id = ctx.request.headers.get("last-event-id", "")
        # The stream keeps a request without the parsed headers and cookies
        # it no longer reads (held for the stream's whole life otherwise).
        kept = dataclasses.replace(ctx, request=Request(ctx.request.scope))
        body = self._events(kept, event_id, session, first, place, watch, last_id, lease)
        headers = {"cache-control": PRIVATE, "x-accel-buffering": "no"}
        return EventStream(body, media_type="text/event-stream", headers=headers)

    def _format(self, ctx: Ctx, session: Session, name: str, position: queue_pb.QueuePosition) -> str:
        position = shown_to(session, position)
        data = to_json(queue_pb.GetQueuePositionResponse(position=position)).decode()
        return f"id: {event_id_of_position(position)}\nevent: {name}\ndata: {data}\n\n"

    async def _events(
        self,
        ctx: Ctx,
        event_id: int,
        session: Session,
        first: queue_pb.QueuePosition,
        place: Place | None,
        watch: Watch | None,
        last_id: str,
        lease: Lease | None = None,
    ) -> AsyncIterator[str]:
        config = self._d.config
        state = self._d.state
        gauge = self._d.metrics.sse_connections
        gauge.inc()
        presence = self._d.presence
        if watch is not None:
            # Reported to the waiting room as present while the stream is open.
            presence.watching(event_id, session.customer_id)
        try:
            yield f"retry: {config.sse_retry_ms}\n\n"
            if watch is None or place is None:
                yield self._format(ctx, session, "final", first)
                return
            # A waiting fan's updates are written from a template (the JSON
            # json_format would write, with only the fan's numbers put in).
            template = PositionJson(place, self._templates)
            position: queue_pb.QueuePosition | None = first
            del first
            version = watch.version
            beats = watch.beats
            while True:
                if position is not None:
                    if position.state in FINAL_STATES or position.admission_state == _SOLD_OUT:
                        yield self._format(ctx, session, "final", position)
                        return
                    shown = event_id_of_position(position)
                    if shown != last_id:
                        last_id = shown
                        yield self._format(ctx, session, "position", position)
                    position = None
                # Woken by the event's next snapshot, its one heartbeat timer,
                # a broken progress stream or the drain.
                while watch.version == version and watch.beats == beats and not state.draining:
                    gone = watch.gone
                    if gone is not None:
                        raise gone
                    await watch.woken()
                if lease is not None:
                    # Woken at least once a heartbeat: the slots stay held.
                    await lease.renew()
                if state.draining:
                    yield f"retry: {max(250, config.sse_retry_ms // 3)}\nevent: reconnect\ndata: {{}}\n\n"
                    return
                sent = False
                if watch.version != version:
                    version = watch.version
                    view = watch.view
                    assert view is not None
                    found = estimated(place, view)
                    if found is None:
                        # Admission reached the fan: QueueService says how.
                        with deadline.detached(_CLAIM_SECONDS):
                            position = await self._claim(ctx, event_id, session.customer_id)
                        # Still waiting (a rebuilt room's place read again):
                        # the place just saved is the one to follow.
                        place = self._d.book.get(event_id, session.customer_id) or place
                        template = PositionJson(place, self._templates)
                        continue
                    shown = f"{WAITING}.{found.ahead}.{view.admission_state}"
                    if view.admission_state == _SOLD_OUT:
                        # Nobody will be admitted: the stream's last event.
                        yield f"id: {shown}\nevent: final\ndata: {template.render(found, view.admission_state)}\n\n"
                        return
                    if shown != last_id:
                        last_id = shown
                        sent = True
                        yield f"id: {shown}\nevent: position\ndata: {template.render(found, view.admission_state)}\n\n"
                if watch.beats != beats:
                    beats = watch.beats
                    if not sent:
                        yield ": keep-alive\n\n"
        except BoxofficeError as err:
            # The stream's status is sent; say why it ends in the stream.
            _log.info("position stream ended", extra={**attrs(ctx), "reason": err.reason, "code": err.code.name})
            yield f"event: error\ndata: {errors.render(err)[1].decode()}\n\n"
        finally:
            gauge.dec()
            if watch is not None:
                watch.close()
                presence.stopped_watching(event_id, session.customer_id)
            if lease is not None:
                lease.release()
