"""The pages as files: a strict Content-Security-Policy and the other
security headers, hashed immutable asset names, gzip, ETags, and the
waiting page with everything it loads at most 60 KB compressed."""

from __future__ import annotations

import gzip
import hashlib
import json
import re

import httpx

from edge_svc.pages import LANGUAGES, Pages, web_root
from tests.browser.harness import Mesh

BUDGET = 60 * 1024
# Scripts copied unchanged from their npm packages.
VENDORED = ("qrcode-generator.js", "jsqr.js")


def csp(header: str) -> dict[str, list[str]]:
    policy: dict[str, list[str]] = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            policy[words[0]] = words[1:]
    return policy


async def test_the_pages_headers_are_strict(mesh: Mesh) -> None:
    async with httpx.AsyncClient(base_url=mesh.url) as client:
        for path in ("/", "/e/1", "/gate"):
            reply = await client.get(path)
            assert reply.status_code == 200
            # Only the gate page may use the camera, and only for itself.
            camera = "camera=(self)" if path == "/gate" else "camera=()"
            assert reply.headers["permissions-policy"].startswith(camera + ","), reply.headers
            assert reply.headers["content-type"].startswith("text/html")
            assert reply.headers["cache-control"] == "public, max-age=60"
            assert reply.headers["x-content-type-options"] == "nosniff"
            assert reply.headers["referrer-policy"] == "same-origin"
            policy = csp(reply.headers["content-security-policy"])
            assert policy["default-src"] == ["'self'"]
            assert policy["script-src"] == ["'self'"]
            assert policy["style-src"] == ["'self'"]
            assert policy["frame-ancestors"] == ["'none'"]
            assert policy["base-uri"] == ["'none'"]
            assert policy["object-src"] == ["'none'"]
            for sources in policy.values():
                assert not {"'unsafe-inline'", "'unsafe-eval'", "*", "data:", "blob:"} & set(sources)
            # No inline script or style, no handler attributes, no other origin.
            page = reply.text
            assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page)
            assert "<style" not in page and " style=" not in page and not re.search(r"\son[a-z]+=", page)
            assert not re.search(r"""(src|href)=["'](https?:)?//""", page)


async def test_assets_are_hashed_immutable_and_gzipped(mesh: Mesh) -> None:
    async with httpx.AsyncClient(base_url=mesh.url) as client:
        page = (await client.get("/e/1")).text
        names = re.findall(r"/assets/([A-Za-z0-9_.-]+)", page)
        assert names
        for name in names:
            plain = await client.get(f"/assets/{name}", headers={"accept-encoding": "identity"})
            assert plain.status_code == 200
            assert plain.headers["cache-control"] == "public, max-age=31536000, immutable"
            assert plain.headers["x-content-type-options"] == "nosniff"
            assert "content-encoding" not in plain.headers
            # The name carries the hash of the content.
            assert name.split(".")[-2] == hashlib.sha256(plain.content).hexdigest()[:12]
            zipped = await client.get(f"/assets/{name}", headers={"accept-encoding": "gzip"})
            assert zipped.headers["content-encoding"] == "gzip"
            assert zipped.content == plain.content  # httpx decodes it
            assert zipped.headers["etag"] != plain.headers["etag"]
            for reply, encoding in ((plain, "identity"), (zipped, "gzip")):
                again = await client.get(
                    f"/assets/{name}", headers={"if-none-match": reply.headers["etag"], "accept-encoding": encoding}
                )
                assert again.status_code == 304
        missing = await client.get("/assets/app.000000000000.js")
        assert missing.status_code == 404


def test_the_waiting_page_weighs_at_most_60_kb_compressed() -> None:
    site = Pages(dev_sign_in=True).site
    page = site.page.body.decode()
    loaded = set(re.findall(r"/assets/([A-Za-z0-9_.-]+)", page))
    # And what its modules import, transitively (the seat map and the QR
    # code load later, on their own pages).
    todo = [name for name in loaded if name.endswith(".js")]
    while todo:
        source = site.assets[todo.pop()].body.decode()
        for found in re.findall(r"""from\s+['"]\./([A-Za-z0-9_.-]+\.js)['"]""", source):
            if found not in loaded:
                loaded.add(found)
                todo.append(found)
    # The largest message catalog: the fan's language is one of them.
    catalogs = [site.names[f"messages/{lang}.json"] for lang in LANGUAGES]
    loaded.add(max(catalogs, key=lambda name: len(site.assets[name].gzipped)))
    total = len(site.page.gzipped) + sum(len(site.assets[name].gzipped) for name in loaded)
    assert {"app.css", "app.js", "waiting.js", "api.js", "i18n.js"} <= {site_source(site, n) for n in loaded}
    assert total <= BUDGET, f"{total} bytes compressed: {sorted(loaded)}"
    # Served bytes decompress to the sources.
    for built in site.assets.values():
        assert gzip.decompress(built.gzipped) == built.body


def site_source(site: object, name: str) -> str:
    names: dict[str, str] = site.names  # type: ignore[attr-defined]
    return next(source for source, hashed in names.items() if hashed == name)


def test_the_build_refuses_a_missing_import(tmp_path: object) -> None:
    import pathlib

    import pytest

    from edge_svc.pages import build

    root = pathlib.Path(str(tmp_path))
    for path in web_root().iterdir():
        if path.is_file():
            (root / path.name).write_bytes(path.read_bytes())
    (root / "messages").mkdir()
    for lang in LANGUAGES:
        (root / "messages" / f"{lang}.json").write_bytes(web_root().joinpath("messages", f"{lang}.json").read_bytes())
    build(root, dev_sign_in=False)
    (root / "app.js").write_text("import { x } from './nowhere.js';\n")
    with pytest.raises(ValueError, match=r"nowhere\.js"):
        build(root, dev_sign_in=False)


def _base(key: str) -> str:
    stem, _, last = key.rpartition(".")
    return stem if last in ("zero", "one", "two", "few", "many", "other") else key


def test_every_string_comes_from_each_catalog() -> None:
    root = web_root()
    catalogs = {
        lang: json.loads(root.joinpath("messages", f"{lang}.json").read_text(encoding="utf-8")) for lang in LANGUAGES
    }
    keys = {lang: {_base(key) for key in messages} for lang, messages in catalogs.items()}
    assert keys["vi"] == keys["en"] and keys["pt-BR"] == keys["en"]
    for lang, messages in catalogs.items():
        for key, text in messages.items():
            assert text.strip(), (lang, key)
            # The same placeholders as the English text.
            english = catalogs["en"].get(key) or catalogs["en"].get(f"{_base(key)}.other", "")
            assert set(re.findall(r"\{(\w+)\}", text)) == set(re.findall(r"\{(\w+)\}", english)), (lang, key)
    used: set[str] = set()
    for name in ("index.html", "gate.html"):
        page = root.joinpath(name).read_text(encoding="utf-8")
        used |= set(re.findall(r'data-ta?="([^"]+)"', page))
    # Every page module's own strings (the vendored libraries have none).
    modules = [path for path in root.iterdir() if path.name.endswith(".js") and path.name not in VENDORED]
    assert {"app.js", "event.js", "tickets.js", "gate.js"} <= {path.name for path in modules}
    for path in modules:
        source = path.read_text(encoding="utf-8")
        used |= set(re.findall(r"\bt\('([A-Za-z0-9_.-]+)'", source))
    # Keys built at run time: each of their values.
    used |= {f"card.{card}" for card in ("pm_card_ok", "pm_card_declined", "pm_card_fail", "pm_card_timeout")}
    used |= {f"seat.{state}" for state in ("free", "taken", "picked")} | {"seat.problem.taken", "seat.problem.full"}
    used |= {"link.live", "link.reconnecting"} | {f"languages.{lang}" for lang in LANGUAGES}
    used |= {f"avail.{state}" for state in ("ON_SALE", "FEW_LEFT", "SOLD_OUT", "NOT_YET_ON_SALE")}
    used |= {
        f"cancel.not.{reason}"
        for reason in (
            "REFUND_NOT_ALLOWED",
            "REFUND_WINDOW_CLOSED",
            "BOOKING_NOT_CONFIRMED",
            "TICKETS_TRANSFERRED",
            "unknown",
        )
    }
    used |= {f"wl.state.WAITLIST_STATE_{state}" for state in ("TAKEN", "LEFT", "LAPSED")}
    missing = sorted(key for key in used if key not in keys["en"])
    assert missing == [], missing


def test_the_build_refuses_any_unfilled_template_name(tmp_path: object) -> None:
    """A name between double braces is filled or fails the build, whatever
    its characters (``{{i18n.js}}`` once shipped as it was); every
    reference the page makes is to an asset the site serves."""
    import pathlib

    import pytest

    from edge_svc.pages import build

    site = Pages(dev_sign_in=False).site
    page = site.page.body.decode()
    assert "{{" not in page
    referenced = re.findall(r'(?:href|src)="/assets/([^"]+)"', page)
    assert "i18n.js" in {site_source(site, name) for name in referenced}
    assert all(name in site.assets for name in referenced), referenced

    root = pathlib.Path(str(tmp_path))
    for path in web_root().iterdir():
        if path.is_file():
            (root / path.name).write_bytes(path.read_bytes())
    (root / "messages").mkdir()
    for lang in LANGUAGES:
        (root / "messages" / f"{lang}.json").write_bytes(web_root().joinpath("messages", f"{lang}.json").read_bytes())
    template = (root / "index.html").read_text()
    for broken, problem in (
        ('<link rel="modulepreload" href="{{Nowhere2.js}}">', r"names Nowhere2\.js, which does not exist"),
        ("<p>{{ unclosed</p>", r"index\.html line \d+ has an unfilled template name"),
    ):
        (root / "index.html").write_text(template.replace("</head>", f"{broken}\n</head>"))
        with pytest.raises(ValueError, match=problem):
            build(root, dev_sign_in=False)
    (root / "index.html").write_text(template)
    (root / "waiting.js").write_text((root / "waiting.js").read_text() + "\n// {{later.js}}\n")
    with pytest.raises(ValueError, match=r"waiting\.js line \d+ has an unfilled template name"):
        build(root, dev_sign_in=False)


def test_the_qr_encoder_is_the_pinned_library_unchanged_with_its_licence() -> None:
    """``qrcode-generator.js`` is the npm package's ES module build byte for
    byte, at the version package.json pins (scripts/browser_deps.sh installs
    it), and its licence is served beside it."""
    from tests.browser.harness import ROOT

    pinned = json.loads((ROOT / "package.json").read_text())["dependencies"]["qrcode-generator"]
    package = ROOT / "node_modules" / "qrcode-generator"
    assert json.loads((package / "package.json").read_text())["version"] == pinned
    vendored = web_root().joinpath("qrcode-generator.js").read_bytes()
    assert vendored == (package / "dist" / "qrcode.mjs").read_bytes()
    licence = web_root().joinpath("qrcode-generator.LICENSE.txt").read_text()
    assert "Copyright (c) 2009 Kazuhiko Arase" in licence and "MIT" in licence and pinned in licence
    site = Pages(dev_sign_in=False).site
    served = {source: site.assets[name] for source, name in site.names.items()}
    assert served["qrcode-generator.LICENSE.txt"].content_type == "text/plain; charset=utf-8"
    assert "qr.js" not in served


def test_the_qr_reader_is_the_pinned_library_unchanged_with_its_licence() -> None:
    """``jsqr.js`` (the gate page's QR reader where the browser has no
    BarcodeDetector) is the npm package's build byte for byte, at the
    version package.json pins, and its licence is served beside it."""
    from tests.browser.harness import ROOT

    pinned = json.loads((ROOT / "package.json").read_text())["dependencies"]["jsqr"]
    package = ROOT / "node_modules" / "jsqr"
    assert json.loads((package / "package.json").read_text())["version"] == pinned
    assert web_root().joinpath("jsqr.js").read_bytes() == (package / "dist" / "jsQR.js").read_bytes()
    licence = web_root().joinpath("jsqr.LICENSE.txt").read_text()
    assert "Apache License" in licence and f"jsqr {pinned}" in licence
    site = Pages(dev_sign_in=False).site
    served = {source: site.assets[name] for source, name in site.names.items()}
    assert served["jsqr.LICENSE.txt"].content_type == "text/plain; charset=utf-8"
