"""The whole mesh and an edge that a test can restart on the same port,
and a headless Chromium (Debian's, driven by Playwright) whose fans are
separate browser contexts."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from playwright.async_api import Browser, BrowserContext, ConsoleMessage, Page, Request, Response

from edge_svc import app as edge_app
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.e2e.harness import whole_mesh
from tests.edge.harness import GENEROUS, EdgeStack
from tests.support import MeshClient, Stores, make_runtime, running

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("BOXOFFICE_CHROMIUM", "/usr/bin/chromium")
# What this machine's headless Chromium needs (no sandbox as root, no GPU,
# nothing fetched behind the page's back).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
# Screenshots of every page in every language (git-ignored).
SHOTS = ROOT / "build" / "screenshots"
LOCALES = {"en": "en-US", "vi": "vi-VN", "pt-BR": "pt-BR"}


def chromium_path() -> str:
    found = shutil.which(CHROMIUM) or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if found is None:
        raise RuntimeError(f"no Chromium at {CHROMIUM}: run scripts/browser_deps.sh as root")
    return found


class Mesh:
    """The mesh (every role of the three services) and one edge in front of
    it, which :meth:`restart_edge` replaces by a new one on the same port."""

    def __init__(self, stores: Stores, addresses: Mapping[str, str], settings: Mapping[str, object]) -> None:
        self._stores = stores
        self._addresses = addresses
        self._settings = settings
        self._edge_exit: contextlib.AsyncExitStack | None = None
        self.operators = {
            name: MeshClient(stores, addresses[name]) for name in ("queue", "booking", "payment", "checkin")
        }
        self.api: EdgeStack | None = None

    @property
    def url(self) -> str:
        assert self.api is not None
        return self.api.url

    async def start_edge(self, port: int = 0, settings: Mapping[str, object] | None = None) -> None:
        rt = make_runtime(self._stores)
        edge = edge_app.compose(
            rt,
            edge_app.Overrides(
                settings={
                    "host": "127.0.0.1",
                    "port": port,
                    "queue_addr": self._addresses["queue"],
                    "booking_addr": self._addresses["booking"],
                    "payment_addr": self._addresses["payment"],
                    "checkin_addr": self._addresses["checkin"],
                    "dev_sign_in": True,
                    "drain_seconds": 0.0,
                    **GENEROUS,
                    **self._settings,
                    **(settings or {}),
                }
            ),
        )
        exit_stack = contextlib.AsyncExitStack()
        await exit_stack.enter_async_context(running([*rt.infrastructure(), *edge.components]))
        self._edge_exit = exit_stack
        self.api = EdgeStack(edge=edge, url=edge.server.url, addresses=self._addresses, operators=self.operators)

    async def stop_edge(self) -> None:
        if self._edge_exit is not None:
            exit_stack, self._edge_exit = self._edge_exit, None
            await exit_stack.aclose()

    async def restart_edge(self, settings: Mapping[str, object] | None = None) -> None:
        """Stops the edge and starts a new one on the same port (with
        ``settings`` over the mesh's, when given)."""
        port = urlsplit(self.url).port
        assert port is not None
        await self.stop_edge()
        await self.start_edge(port, settings)

    async def event(self, **kwargs: Any) -> int:
        assert self.api is not None
        return await self.api.event(**kwargs)

    async def resume(self, event_id: int) -> None:
        queue = self.operators["queue"].stub(qpb_grpc.QueueServiceStub)
        await queue.ResumeAdmission(qpb.ResumeAdmissionRequest(event_id=event_id))

    async def close(self) -> None:
        await self.stop_edge()
        for client in self.operators.values():
            await client.close()


@contextlib.asynccontextmanager
async def mesh_with_edge(
    stores: Stores, *, prefix: str, settings: Mapping[str, object] | None = None
) -> AsyncIterator[Mesh]:
    async with whole_mesh(stores, f"ticket-issued-{prefix}") as addresses:
        mesh = Mesh(stores, addresses, settings or {})
        try:
            await mesh.start_edge()
            yield mesh
        finally:
            await mesh.close()


@dataclass
class Fan:
    """One fan: a browser context of their own (cookies, storage) and a page,
    with every request the page made."""

    context: BrowserContext
    page: Page
    origin: str
    requests: list[str] = field(default_factory=list)
    # Console errors, requests that failed and answers of 400 or more, as
    # they happened (see troubles()).
    problems: list[str] = field(default_factory=list)

    def foreign(self) -> list[str]:
        """Requests to anywhere but the edge's origin."""
        return [url for url in self.requests if not url.startswith(self.origin + "/")]

    def troubles(self, *expected: str) -> list[str]:
        """What went wrong in the fan's pages: every console error, failed
        request and answer of 400 or more, but the "who is signed in" probe's
        401 before sign-in (the browser logs that answer as a console error
        too) and any of ``expected`` (a test's deliberate failures, each
        ``"<status> <method> <path>"``)."""
        allowed = {"401 GET /v1/session", *expected}
        noise = {
            f"console: Failed to load resource: the server responded with a status of {a.split()[0]}" for a in allowed
        }
        return [p for p in self.problems if p.split(" (", 1)[0] not in allowed and not p.startswith(tuple(noise))]


async def new_fan(browser: Browser, origin: str, *, lang: str = "en", reduced_motion: bool = True) -> Fan:
    context = await browser.new_context(
        locale=LOCALES[lang],
        viewport={"width": 1100, "height": 900},
        reduced_motion="reduce" if reduced_motion else "no-preference",
        service_workers="block",
    )
    page = await context.new_page()
    fan = Fan(context=context, page=page, origin=origin)

    def record(request: Request) -> None:
        fan.requests.append(request.url)

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            fan.problems.append(f"console: {message.text}")

    def failed(request: Request) -> None:
        if request.failure == "net::ERR_ABORTED" and urlsplit(request.url).path.endswith(":watch"):
            return  # the page closed its own stream of the fan's place (admitted, left)
        fan.problems.append(f"failed {request.method} {request.url}: {request.failure}")

    def answered(response: Response) -> None:
        if response.status >= 400:
            path = urlsplit(response.url).path
            fan.problems.append(f"{response.status} {response.request.method} {path} ({response.url})")

    context.on("request", record)
    context.on("console", console)
    context.on("requestfailed", failed)
    context.on("response", answered)
    return fan


async def admitted_client(mesh: Mesh, name: str, event_id: int) -> Any:
    """A fan through the API only (httpx), signed in, joined and admitted."""
    from tests.e2e.harness import eventually
    from tests.edge.harness import sign_in

    assert mesh.api is not None
    client = mesh.api.client()
    await sign_in(client, name)
    joined = await client.post(f"/v1/events/{event_id}/queue:join", json={})
    assert joined.status_code == 200, joined.text

    async def admitted() -> bool | None:
        reply = await client.get(f"/v1/events/{event_id}/queue/position")
        assert reply.status_code == 200, reply.text
        return True if reply.json()["position"]["state"] == "QUEUE_STATE_ADMITTED" else None

    await eventually(admitted, f"{name} admitted")
    return client
