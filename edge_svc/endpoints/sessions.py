"""Sessions: development sign-in, who is signed in, sign-out."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from starlette.responses import Response

from boxoffice import boundedjson
from boxoffice.errors import BoxofficeError, InvalidArgument, NotFound
from edge_svc import errors
from edge_svc.endpoints.common import (
    ACCESS_COOKIE,
    MAX_BODY_DEPTH,
    PLACE_COOKIE,
    SESSION_COOKIE,
    Callers,
    EdgeDeps,
    rfc3339,
)
from edge_svc.http import Cookie, Ctx, Handler, json_response, read_body
from edge_svc.identity import Session, is_customer_id, verified_email

_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,64}$")
_SIGN_IN_MAX_BYTES = 4096


class Sessions:
    def __init__(self, deps: EdgeDeps, callers: Callers) -> None:
        self._d = deps
        self._callers = callers

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "CreateSession": self.create_session,
            "GetSession": self.get_session,
            "DeleteSession": self.delete_session,
        }

    async def create_session(self, ctx: Ctx) -> Response:
        if not self._d.config.dev_sign_in:
            raise NotFound("development sign-in is off", reason="SIGN_IN_DISABLED")
        await self._callers.ip_limit(ctx)
        self._callers.same_site(ctx)
        body = await read_body(ctx.request, _SIGN_IN_MAX_BYTES)
        try:
            document = boundedjson.loads(body or b"{}", max_bytes=_SIGN_IN_MAX_BYTES, max_depth=MAX_BODY_DEPTH)
            name = document.get("name") if isinstance(document, dict) else None
            email = document.get("email") if isinstance(document, dict) else None
        except ValueError as err:
            raise errors.malformed_json(str(err)) from None
        if email is not None and verified_email(email) is None:
            raise InvalidArgument(
                "email must be an e-mail address of at most 254 characters",
                reason="INVALID_FIELD",
                metadata={"field": "email"},
            )
        if not isinstance(name, str) or not _NAME.match(name.strip()) or not is_customer_id(name.strip()):
            raise InvalidArgument(
                "name must be 1 to 64 printable characters", reason="INVALID_FIELD", metadata={"field": "name"}
            )
        value, session = self._d.sessions.issue(name.strip(), verified_email(email))
        ctx.customer_id = session.customer_id
        ctx.cookies_out.append(Cookie(SESSION_COOKIE, value, self._d.sessions.ttl_seconds))
        return json_response(_session_json(session))

    async def get_session(self, ctx: Ctx) -> Response:
        return json_response(_session_json(await self._callers.fan(ctx)))

    async def delete_session(self, ctx: Ctx) -> Response:
        """Sign-out: a genuine session cookie is recorded as signed out (it
        stops working at once, everywhere), then every cookie is cleared."""
        cookie = ctx.request.cookies.get(SESSION_COOKIE)
        if cookie and self._d.signouts is not None:
            try:
                session = self._d.sessions.verify(cookie)
            except BoxofficeError:
                session = None
            if session is not None:
                await self._callers.ip_limit(ctx)
                self._callers.same_site(ctx)
                left = session.expires_at - self._d.clock.now()
                await self._d.signouts.record(cookie, seconds_left=left)
        for name in (SESSION_COOKIE, ACCESS_COOKIE, PLACE_COOKIE):
            ctx.cookies_out.append(Cookie(name, "", 0))
        return json_response(b"{}")


def _session_json(session: Session) -> bytes:
    return json.dumps({"customerId": session.customer_id, "expiresAt": rfc3339(session.expires_at)}).encode()
