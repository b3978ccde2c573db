"""Many Server-Sent Event clients in one process, for tests that need more
connections than one process may hold beside the server: each client sends
``GET path`` with its own cookie and counts as connected once its first
``event: position`` arrived (retrying a failed attempt, as a browser does). Prints ``ready <n> failed <m>`` once every
client connected or failed, then holds the connections until stdin closes.

Usage: python -m tests.edge.sse_clients HOST PORT PATH COOKIES_FILE
(COOKIES_FILE: one Cookie header value per line)
"""

from __future__ import annotations

import asyncio
import resource
import sys


async def _connect(host: str, port: int, path: str, cookie: str) -> tuple[bool, asyncio.StreamWriter | None]:
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\nCookie: {cookie}\r\n\r\n".encode()
        )
        status = await reader.readline()
        if b" 200 " not in status:
            writer.close()
            return False, None
        while True:
            line = await reader.readline()
            if not line:
                return False, None
            if line.startswith(b"event: position"):
                return True, writer
    except OSError:
        return False, None


async def _client(host: str, port: int, path: str, cookie: str) -> tuple[bool, asyncio.StreamWriter | None]:
    """Connects as EventSource does: a refused or failed attempt (a server
    busy answering 10,000 others says 503 with Retry-After) is retried after
    a pause, a few times."""
    for attempt in range(_ATTEMPTS):
        connected, writer = await _connect(host, port, path, cookie)
        if connected:
            return True, writer
        await asyncio.sleep(0.5 * (attempt + 1))
    return False, None


_ATTEMPTS = 5


async def main(cookies: list[str]) -> None:
    host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    results: list[tuple[bool, asyncio.StreamWriter | None]] = []
    for start in range(0, len(cookies), 500):
        batch = cookies[start : start + 500]
        results.extend(await asyncio.gather(*(_client(host, port, path, c) for c in batch)))
    ok = sum(1 for good, _ in results if good)
    print(f"ready {ok} failed {len(results) - ok}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for _, writer in results:
        if writer is not None:
            writer.close()


if __name__ == "__main__":
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with open(sys.argv[4]) as handle:
        asyncio.run(main([line.strip() for line in handle if line.strip()]))
