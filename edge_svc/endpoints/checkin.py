"""The door through the edge: gate devices' scans, the check-in list and
offline uploads (route table: DEVICE), the public keys that verify ticket
codes (PUBLIC, cacheable) and a fan's rotating-code secret (FAN).

A gate device presents ``Authorization: Device <key>``; the edge passes the
key on untouched (:attr:`~edge_svc.mesh.CallContext.device_key`) and
CheckInService decides whose it is and for which event. The edge only
refuses what cannot be a device: no key at all (401 DEVICE_KEY_MISSING),
or a fan's session or bearer token (403 NOT_A_DEVICE).

The check-in list is newline-delimited JSON (``application/x-ndjson``), not
Server-Sent Events: a browser's EventSource cannot send the device's
``Authorization`` header, and the list is a download that ends, not a feed.
Each line is one message of ExportCheckInList's stream in the proto3 JSON
mapping (``{"entries": [...], "cursor": ""}``); the last line carries the
cursor to ask from next (``?since=<cursor>``) and the event's rules at the
door (``"rules": {"staticCodes": true}``). A failure before the first
line is an ordinary error answer; one after it is a last line
``{"error": {...}}`` in Google's JSON error shape, and the list is then
incomplete (ask again with the cursor held before).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping

from starlette.responses import Response, StreamingResponse

from boxoffice import lifecycle
from boxoffice.errors import BoxofficeError, PermissionDenied, Unauthenticated
from edge_svc import errors
from edge_svc.cache import PublicCache
from edge_svc.endpoints.common import (
    SESSION_COOKIE,
    Callers,
    EdgeDeps,
    call_context,
    event_id_of,
    read_message,
    to_json,
    unknown_query,
)
from edge_svc.http import PRIVATE, Ctx, Handler, json_response
from edge_svc.mesh import CHECKIN, CallContext
from edge_svc.ratelimit import Limit
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as checkin_pb

# How long the edge and a CDN keep the public keys (they change when a key
# is rotated in, which happens well before its first code is scanned).
KEYS_MAX_AGE_SECONDS = 300
# An offline device uploads at most 10,000 scans (a scan is about 350 bytes
# of JSON).
UPLOAD_MAX_BYTES = 8 << 20
# A device key is 47 characters; anything much longer is not one.
_KEY_MAX_LENGTH = 256
NDJSON = "application/x-ndjson"


class CheckIn:
    def __init__(self, deps: EdgeDeps, callers: Callers) -> None:
        self._d = deps
        self._callers = callers
        config = deps.config
        # A device spends its own allowance, as a fan's account does.
        self._device_limit = Limit(config.account_rate_per_second, config.account_burst)
        self._keys = PublicCache(
            max_age_seconds=KEYS_MAX_AGE_SECONDS, load_timeout_seconds=config.request_timeout_seconds, capacity=1000
        )

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "Scan": self.scan,
            "ExportCheckInList": self.export_checkin_list,
            "UploadScans": self.upload_scans,
            "GetCheckInKeys": self.get_checkin_keys,
            "GetTicketRotation": self.get_ticket_rotation,
        }

    async def device(self, ctx: Ctx) -> CallContext:
        """The call context of a gate device's request (route table: DEVICE),
        carrying its key, after the per-address and per-device limits."""
        headers = ctx.request.headers
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        key = credentials.strip()
        if scheme.lower() != "device":
            await self._callers.ip_limit(ctx)
            if scheme or ctx.request.cookies.get(SESSION_COOKIE):
                raise PermissionDenied(
                    "this route is for gate devices (Authorization: Device <key>), not fans", reason="NOT_A_DEVICE"
                )
            raise Unauthenticated(
                "a gate device's key is required (Authorization: Device <key>)", reason="DEVICE_KEY_MISSING"
            )
        await self._callers.ip_limit(ctx)
        if not key:
            raise Unauthenticated(
                "a gate device's key is required (Authorization: Device <key>)", reason="DEVICE_KEY_MISSING"
            )
        if len(key) > _KEY_MAX_LENGTH:
            # Not a key; said as CheckInService says it of any other non-key.
            raise Unauthenticated("the device key is not valid", reason="DEVICE_KEY_MISSING")
        # Counted per key (its hash: the key itself is never kept).
        await self._callers.limit_subject("device", hashlib.sha256(key.encode()).hexdigest()[:32], self._device_limit)
        return CallContext(request_id=ctx.request_id, traceparent=ctx.traceparent, device_key=key)

    async def scan(self, ctx: Ctx) -> Response:
        call = await self.device(ctx)
        request = checkin_pb.ScanRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        request.event_id = event_id_of(ctx)
        reply = await self._d.mesh.call(CHECKIN, "Scan", request, call)
        return json_response(to_json(reply))

    async def upload_scans(self, ctx: Ctx) -> Response:
        call = await self.device(ctx)
        request = checkin_pb.UploadScansRequest()
        await read_message(ctx, request, max_bytes=max(UPLOAD_MAX_BYTES, self._d.config.max_body_bytes))
        request.event_id = event_id_of(ctx)
        reply = await self._d.mesh.call(CHECKIN, "UploadScans", request, call)
        return json_response(to_json(reply))

    async def export_checkin_list(self, ctx: Ctx) -> Response:
        call = await self.device(ctx)
        query = ctx.request.query_params
        if unknown := set(query) - {"since"}:
            raise unknown_query(unknown)
        request = checkin_pb.ExportCheckInListRequest(event_id=event_id_of(ctx), since=query.get("since", ""))
        replies = self._d.mesh.stream(CHECKIN, "ExportCheckInList", request, call)
        try:
            # The first message is awaited here: a refusal (the key, the
            # cursor) is an ordinary error answer, not a broken stream.
            first = await anext(replies)
        except StopAsyncIteration:
            first = None
        except BaseException:
            await lifecycle.close_here(replies)
            raise
        return StreamingResponse(
            _lines(first, replies), media_type=NDJSON, headers={"cache-control": PRIVATE, "x-accel-buffering": "no"}
        )

    async def get_checkin_keys(self, ctx: Ctx) -> Response:
        if ctx.request.query_params:
            raise unknown_query(set(ctx.request.query_params))
        event_id = event_id_of(ctx)

        async def load() -> bytes:
            request = checkin_pb.GetCheckInKeysRequest(event_id=event_id)
            return to_json(await self._d.mesh.call(CHECKIN, "GetCheckInKeys", request, call_context(ctx, None)))

        return await self._keys.answer(ctx, event_id, load)

    async def get_ticket_rotation(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        if ctx.request.query_params:
            raise unknown_query(set(ctx.request.query_params))
        request = checkin_pb.GetTicketRotationRequest(ticket_id=ctx.params["ticket_id"])
        try:
            reply = await self._d.mesh.call(
                CHECKIN, "GetTicketRotation", request, call_context(ctx, session.customer_id)
            )
        except BoxofficeError as err:
            if err.reason == "TICKET_NOT_FOUND":
                # Another fan's ticket, answered as one that does not exist.
                raise errors.not_found("ticket") from None
            raise
        return json_response(to_json(reply))


async def _lines(
    first: checkin_pb.ExportCheckInListResponse | None, rest: AsyncIterator[checkin_pb.ExportCheckInListResponse]
) -> AsyncIterator[bytes]:
    try:
        if first is not None:
            yield to_json(first) + b"\n"
        async for reply in rest:
            yield to_json(reply) + b"\n"
    except BoxofficeError as err:
        # The head is sent: the failure is the stream's last line.
        _, body, _ = errors.render(err)
        yield body.rstrip(b"\n") + b"\n"
    finally:
        await lifecycle.close_here(rest)
