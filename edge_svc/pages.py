"""The fan's pages: static files served by the edge at ``/``, ``/e/{event_id}``
and ``/assets/{asset}``, the same for everyone, so that a CDN serves them to
two million people. The pages read the fan's state from the API."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import Response

from edge_svc.http import Ctx, Handler


class Pages:
    """The page routes' handlers."""

    def __init__(self, *, dev_sign_in: bool) -> None:
        self._dev_sign_in = dev_sign_in

    def table(self) -> Mapping[str, Handler]:
        return {"GetIndexPage": self.index, "GetEventPage": self.event_page, "GetAsset": self.asset}

    async def index(self, ctx: Ctx) -> Response:
        return Response("<!doctype html><title>boxoffice</title>\n", media_type="text/html")

    async def event_page(self, ctx: Ctx) -> Response:
        return await self.index(ctx)

    async def asset(self, ctx: Ctx) -> Response:
        return Response(status_code=404)
