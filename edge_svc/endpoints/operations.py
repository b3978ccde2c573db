"""Operations: liveness, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from edge_svc.endpoints.common import EdgeDeps
from edge_svc.http import PRIVATE, Ctx, Handler


class Operations:
    def __init__(self, deps: EdgeDeps) -> None:
        self._d = deps

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "GetHealth": self.get_health,
            "GetReadiness": self.get_readiness,
            "GetMetrics": self.get_metrics,
            "GetOpenApi": self.get_open_api,
        }

    async def get_health(self, ctx: Ctx) -> Response:
        return Response("ok\n", media_type="text/plain", headers={"cache-control": PRIVATE})

    async def get_readiness(self, ctx: Ctx) -> Response:
        ready = self._d.state.ready
        return Response(
            "ready\n" if ready else "not ready\n",
            status_code=200 if ready else 503,
            media_type="text/plain",
            headers={"cache-control": PRIVATE},
        )

    async def get_metrics(self, ctx: Ctx) -> Response:
        return Response(generate_latest(self._d.registry), media_type=CONTENT_TYPE_LATEST)

    async def get_open_api(self, ctx: Ctx) -> Response:
        return self._d.events.fresh(ctx, self._d.openapi, 300)
