"""A load generator process for the edge benchmarks: raw HTTP/1.1 over
keep-alive asyncio streams on uvloop (far cheaper per request than the
servers it drives), one JSON line of figures on stdout.

``python -m bench.edge_load signin --port P --first K --count N --out FILE``
signs fans ``fan-K`` .. ``fan-(K+N-1)`` in (``POST /v1/session``) and writes
their session cookies to FILE, one a line.

``python -m bench.edge_load load --port P --method POST --path /v1/...``
``[--cookies FILE] --connections C --start T --warmup W --seconds S`` runs a
closed loop on C connections from monotonic time T: W seconds of warm-up,
then S measured seconds. Each request carries the next fan's cookie (a
different fan each, as long as the file lasts). It prints the requests
answered and failed in the measured window, latency percentiles and the
client's own CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

_SESSION = b"bo_session="


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bytes]:
    """(status, head, body) of one response with a Content-Length (or none)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    at = lower.find(b"\r\ncontent-length:")
    length = 0
    if at >= 0:
        end = lower.find(b"\r\n", at + 17)
        length = int(lower[at + 17 : end])
    body = await reader.readexactly(length) if length else b""
    return status, head, body


def request_bytes(method: str, path: str, port: int, *, cookie: str | None, body: bytes) -> bytes:
    """A browser-like request: Host, Origin (the edge's own: the CSRF check
    passes) and the fan's session cookie."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Origin: http://127.0.0.1:{port}"]
    if cookie is not None:
        lines.append(f"Cookie: bo_session={cookie}")
    if method in ("POST", "PUT", "PATCH"):
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body if method in ("POST", "PUT", "PATCH") else b"")


def session_cookie(head: bytes) -> str | None:
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"set-cookie:") and _SESSION in line:
            value = line.split(_SESSION, 1)[1].split(b";", 1)[0]
            return value.decode()
    return None


def read_cookies(path: str) -> list[str]:
    with open(path) as lines:
        return [line.strip() for line in lines if line.strip()]


async def _signin(port: int, first: int, count: int, connections: int) -> tuple[list[str | None], dict[str, object]]:
    cookies: list[str | None] = [None] * count
    next_index = 0
    failures: Counter[int] = Counter()
    began = time.monotonic()

    async def worker() -> None:
        nonlocal next_index
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while next_index < count:
                i = next_index
                next_index += 1
                body = json.dumps({"name": f"fan-{first + i}"}).encode()
                writer.write(request_bytes("POST", "/v1/session", port, cookie=None, body=body))
                status, head, _ = await read_response(reader)
                cookie = session_cookie(head) if status == 200 else None
                if cookie is None:
                    failures[status] += 1
                cookies[i] = cookie
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    seconds = time.monotonic() - began
    return cookies, {"signed": sum(1 for c in cookies if c), "failed": dict(failures), "seconds": seconds}


@dataclass
class _Tally:
    ok: int = 0
    failed: int = 0
    reused: int = 0


async def _load(
    port: int,
    method: str,
    path: str,
    body: bytes,
    cookies: Sequence[str],
    connections: int,
    start: float,
    warmup: float,
    seconds: float,
    paths: Sequence[str] = (),
) -> dict[str, object]:
    measure_from = start + warmup
    stop_at = measure_from + seconds
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    tally = _Tally()
    next_cookie = 0
    fixed = request_bytes(method, path, port, cookie=None, body=body) if not cookies else b""
    # Several paths: each request takes the next one, each connection from
    # its own starting point.
    rotating = [request_bytes(method, p, port, cookie=None, body=body) for p in paths]
    next_path = 0

    async def worker() -> None:
        nonlocal next_cookie, next_path
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await asyncio.sleep(max(0.0, start - time.monotonic()))
            while True:
                began = time.monotonic()
                if began >= stop_at:
                    return
                if cookies:
                    if next_cookie >= len(cookies):
                        tally.reused += 1
                    cookie = cookies[next_cookie % len(cookies)]
                    next_cookie += 1
                    writer.write(request_bytes(method, path, port, cookie=cookie, body=body))
                elif rotating:
                    writer.write(rotating[next_path % len(rotating)])
                    next_path += 1
                else:
                    writer.write(fixed)
                status, _, _ = await read_response(reader)
                if began >= measure_from:
                    latencies.append(time.monotonic() - began)
                    statuses[status] += 1
                    if 200 <= status < 400:
                        tally.ok += 1
                    else:
                        tally.failed += 1
        finally:
            writer.close()

    cpu = os.times()
    await asyncio.gather(*(worker() for _ in range(connections)))
    used = os.times()
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else 0.0

    return {
        "ok": tally.ok,
        "failed": tally.failed,
        "seconds": seconds,
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "statuses": {str(k): v for k, v in statuses.items()},
        "cookies_reused": tally.reused,
        "client_cpu_s": (used.user - cpu.user) + (used.system - cpu.system),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.edge_load")
    parser.add_argument("mode", choices=("signin", "load"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--out", default="")
    parser.add_argument("--method", default="GET")
    parser.add_argument("--path", default="/")
    parser.add_argument("--paths", default="", help="a file of paths, one a line, asked in turn (instead of --path)")
    parser.add_argument("--body", default="{}")
    parser.add_argument("--cookies", default="", help="a file of session cookies, one a line")
    parser.add_argument("--cookie-offset", type=int, default=0, help="the first line of the file this process uses")
    parser.add_argument("--cookie-count", type=int, default=0, help="how many lines (0: all from the offset)")
    parser.add_argument("--start", type=float, default=0.0, help="monotonic time to start at (0: now)")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    import uvloop

    result: dict[str, object]
    if args.mode == "signin":
        signed, result = uvloop.run(_signin(args.port, args.first, args.count, args.connections))
        with open(args.out, "w") as file:
            file.writelines(f"{cookie or ''}\n" for cookie in signed)
    else:
        cookies: list[str] = []
        if args.cookies:
            cookies = read_cookies(args.cookies)[args.cookie_offset :]
            if args.cookie_count:
                cookies = cookies[: args.cookie_count]
        result = uvloop.run(
            _load(
                args.port,
                args.method,
                args.path,
                args.body.encode(),
                cookies,
                args.connections,
                args.start or time.monotonic(),
                args.warmup,
                args.seconds,
                read_cookies(args.paths) if args.paths else (),
            )
        )
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
