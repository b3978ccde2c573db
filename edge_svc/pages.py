"""The fan's pages: static files served by the edge at ``/``, ``/e/{event_id}``
and ``/assets/{asset}``, the same for everyone, so that a CDN serves them to
two million people. The pages read the fan's state from the API.

The gate page (``/gate``, for staff phones at the door) is built the same
way from ``gate.html``; it alone may use the camera.

The sources are in ``edge_svc/web/``. At start they are built once, in
memory (no network, no bundler):

- every asset gets a content-hashed name, ``<stem>.<hash>.<ext>``, served
  ``immutable`` for a year; a module's imports of its siblings
  (``'./waiting.js'``) are rewritten to their hashed names first, so that a
  module's hash covers what it imports;
- the page (``index.html``) gets its assets' names and the deployment's facts
  (whether development sign-in is on, the message catalogs' names) in
  ``<meta>`` tags, and is served ``public`` with a short max age;
- everything is gzip-compressed once, and served compressed to clients that
  accept it.

Every answer carries a strict Content-Security-Policy (scripts, styles and
connections to the edge's own origin only, no inline script or style, no
framing), ``X-Content-Type-Options: nosniff`` and
``Referrer-Policy: same-origin``.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType

from starlette.responses import Response

from edge_svc.http import Ctx, Handler

CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "font-src 'self'",
        "connect-src 'self'",
        "worker-src 'self'",
        "manifest-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
PAGE_MAX_AGE_SECONDS = 60
ASSET_CACHE = "public, max-age=31536000, immutable"

_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "js": "text/javascript; charset=utf-8",
        "css": "text/css; charset=utf-8",
        "json": "application/json",
        "svg": "image/svg+xml",
        "html": "text/html; charset=utf-8",
        # The licences of vendored scripts, served beside them.
        "txt": "text/plain; charset=utf-8",
    }
)
_IMPORT = re.compile(r"""(['"])\./([A-Za-z0-9_-]+\.js)\1""")
# Any name between double braces: one the build does not know fails it.
_PLACEHOLDER = re.compile(r"\{\{([^{}]*)\}\}")
# Message catalogs: one file per language, in web/messages/.
LANGUAGES = ("en", "vi", "pt-BR")


@dataclass(frozen=True, slots=True)
class Built:
    """One file as served: its bytes, gzip-compressed bytes and headers."""

    body: bytes
    gzipped: bytes
    content_type: str
    etag: str


@dataclass(frozen=True, slots=True)
class Site:
    """The built pages: the page, and the assets by hashed name."""

    page: Built
    # The gate page (gate.html).
    gate: Built
    assets: Mapping[str, Built]
    # Source name (``app.js``, ``messages/en.json``) -> hashed asset name.
    names: Mapping[str, str]


def _built(body: bytes, content_type: str) -> Built:
    digest = hashlib.sha256(body).hexdigest()
    return Built(body, gzip.compress(body, compresslevel=9, mtime=0), content_type, f'"{digest[:32]}"')


def _hashed(source: str, body: bytes) -> str:
    base = source.rsplit("/", 1)[-1]
    stem, _, ext = base.rpartition(".")
    return f"{stem}.{hashlib.sha256(body).hexdigest()[:12]}.{ext}"


def _sources(root: Traversable) -> dict[str, bytes]:
    found: dict[str, bytes] = {}

    def walk(node: Traversable, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.name.startswith("."):
                continue
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
            else:
                found[f"{prefix}{child.name}"] = child.read_bytes()

    walk(root, "")
    return found


def build(root: Traversable, *, dev_sign_in: bool) -> Site:
    """Builds the site from the sources under ``root``."""
    sources = _sources(root)
    templates = {name: sources.pop(name).decode() for name in ("index.html", "gate.html")}
    names: dict[str, str] = {}
    bodies: dict[str, bytes] = {}

    def settle(source: str, trail: tuple[str, ...]) -> str:
        if source in names:
            return names[source]
        if source in trail:
            raise ValueError(f"web: modules import each other in a cycle: {' -> '.join((*trail, source))}")
        if source not in sources:
            raise ValueError(f"web: {trail[-1] if trail else 'the page'} imports {source}, which does not exist")
        body = sources[source]
        if source.endswith(".js"):
            text = body.decode()
            text = _IMPORT.sub(lambda m: f"{m.group(1)}./{settle(m.group(2), (*trail, source))}{m.group(1)}", text)
            body = text.encode()
        name = _hashed(source, body)
        if name in bodies:
            raise ValueError(f"web: two sources are served as {name}")
        names[source] = name
        bodies[name] = body
        return name

    for source in sorted(sources):
        settle(source, ())
    catalogs = {lang: f"/assets/{names[f'messages/{lang}.json']}" for lang in LANGUAGES}
    facts = {"devSignIn": dev_sign_in, "catalogs": catalogs, "languages": list(LANGUAGES)}

    def filled(page: str) -> str:
        def fill(match: re.Match[str]) -> str:
            key = match.group(1)
            if key == "config":
                return html.escape(json.dumps(facts, separators=(",", ":")), quote=True)
            if key not in names:
                raise ValueError(f"web: {page} names {key}, which does not exist")
            return f"/assets/{names[key]}"

        return _PLACEHOLDER.sub(fill, templates[page])

    pages = {page: filled(page) for page in templates}
    texts = [*pages.items(), *((src, bodies[name].decode()) for src, name in names.items() if _texty(src))]
    for source, text in texts:
        if "{{" in text:
            # A template name left unfilled would ship as a broken reference.
            line = text.count("\n", 0, text.find("{{")) + 1
            raise ValueError(f"web: {source} line {line} has an unfilled template name ({{{{...}}}})")
    assets = {name: _built(body, _TYPES[name.rsplit(".", 1)[-1]]) for name, body in bodies.items()}
    return Site(
        page=_built(pages["index.html"].encode(), _TYPES["html"]),
        gate=_built(pages["gate.html"].encode(), _TYPES["html"]),
        assets=assets,
        names=names,
    )


def _texty(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ("js", "css", "html", "json", "svg")


def web_root() -> Traversable:
    return resources.files("edge_svc").joinpath("web")


def _accepts_gzip(ctx: Ctx) -> bool:
    for part in ctx.request.headers.get("accept-encoding", "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip()
            return not (q.startswith("q=") and _zero(q[2:]))
    return False


def _zero(text: str) -> bool:
    try:
        return float(text) == 0.0
    except ValueError:
        return False


def secure_headers(*, camera: bool = False) -> dict[str, str]:
    """The headers of every page and asset; ``camera``: the page may ask
    for the camera (the gate page, on its own origin only)."""
    return {
        "content-security-policy": CSP,
        "x-content-type-options": "nosniff",
        "referrer-policy": "same-origin",
        "cross-origin-opener-policy": "same-origin",
        "permissions-policy": f"camera=({'self' if camera else ''}), microphone=(), geolocation=(), payment=()",
    }


class Pages:
    """The page routes' handlers, over the site built at construction."""

    def __init__(self, *, dev_sign_in: bool, root: Traversable | None = None) -> None:
        self.site = build(root or web_root(), dev_sign_in=dev_sign_in)

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "GetIndexPage": self.index,
            "GetEventPage": self.event_page,
            "GetGatePage": self.gate,
            "GetClaimPage": self.index,
            "GetAsset": self.asset,
        }

    async def index(self, ctx: Ctx) -> Response:
        return self._serve(ctx, self.site.page, f"public, max-age={PAGE_MAX_AGE_SECONDS}")

    async def event_page(self, ctx: Ctx) -> Response:
        return await self.index(ctx)

    async def gate(self, ctx: Ctx) -> Response:
        return self._serve(ctx, self.site.gate, f"public, max-age={PAGE_MAX_AGE_SECONDS}", camera=True)

    async def asset(self, ctx: Ctx) -> Response:
        found = self.site.assets.get(ctx.params["asset"])
        if found is None:
            headers = {**secure_headers(), "cache-control": "public, max-age=60"}
            return Response(b"not found\n", status_code=404, media_type="text/plain", headers=headers)
        return self._serve(ctx, found, ASSET_CACHE)

    def _serve(self, ctx: Ctx, built: Built, cache_control: str, *, camera: bool = False) -> Response:
        zipped = _accepts_gzip(ctx)
        # Each encoding is its own representation, with its own tag.
        etag = built.etag[:-1] + '-gz"' if zipped else built.etag
        headers = {
            **secure_headers(camera=camera),
            "cache-control": cache_control,
            "etag": etag,
            "vary": "Accept-Encoding",
        }
        if etag in [tag.strip() for tag in ctx.request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers=headers)
        body = built.body
        if zipped:
            body = built.gzipped
            headers["content-encoding"] = "gzip"
        if ctx.request.method == "HEAD":
            headers["content-length"] = str(len(body))
            return Response(b"", headers=headers, media_type=built.content_type)
        return Response(body, headers=headers, media_type=built.content_type)
