"""A client process holding many Server-Sent Event streams, for
bench/edge_streams.py: raw HTTP/1.1 over asyncio streams on uvloop, the
lightest client there is.

``python -m bench.edge_sse_client --port P --path PATH [--cookies FILE
--cookie-offset K] --count N [--open-concurrency C]`` opens N streams (at
most C opening at once; each with the next fan's session cookie when a
file is given) and reads each one's first ``position`` event, then prints
``OPEN <ok> <failed> <why>``; then waits for one more ``position`` event on
every open stream and prints ``DONE <first> <last> <received>`` (monotonic
times, comparable between processes of one machine); then it exits when its
stdin closes. Comments (heartbeats) and ``retry:`` lines are not events.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from collections.abc import Sequence

from bench.edge_load import read_cookies


class _Stream:
    """One SSE response: its chunked body, split into events."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._buffer = b""

    async def next_event(self, name: bytes) -> bytes:
        """The next event called ``name`` (its whole block)."""
        while True:
            end = self._buffer.find(b"\n\n")
            while end >= 0:
                block, self._buffer = self._buffer[:end], self._buffer[end + 2 :]
                if b"event: " + name in block:
                    return block
                end = self._buffer.find(b"\n\n")
            self._buffer += await self._chunk()

    async def _chunk(self) -> bytes:
        size_line = await self._reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0], 16)
        if size == 0:
            raise EOFError("the stream ended")
        data = await self._reader.readexactly(size + 2)
        return data[:-2]


async def _main(
    port: int, path: str, cookies: Sequence[str], count: int, open_concurrency: int, update_timeout: float
) -> None:
    failures: Counter[str] = Counter()
    gate = asyncio.Semaphore(open_concurrency)
    opened = 0
    settled = 0
    all_settled = asyncio.Event()
    stamps: list[float] = []
    writers: list[asyncio.StreamWriter] = []

    def settle() -> None:
        nonlocal settled
        settled += 1
        if settled == count:
            all_settled.set()

    async def one(i: int) -> None:
        nonlocal opened
        cookie = f"Cookie: bo_session={cookies[i]}\r\n" if cookies else ""
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n{cookie}\r\n"
        ).encode()
        try:
            async with gate:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writers.append(writer)
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = head[9:12].decode()
                if status != "200":
                    failures[f"http-{status}"] += 1
                    writer.close()
                    return
                stream = _Stream(reader)
                await stream.next_event(b"position")
                opened += 1
        except (OSError, EOFError, asyncio.IncompleteReadError, ValueError) as err:
            failures[type(err).__name__] += 1
            return
        finally:
            settle()
        try:
            await stream.next_event(b"position")
            stamps.append(time.monotonic())
        except (OSError, EOFError, asyncio.IncompleteReadError, ValueError):
            failures["lost"] += 1

    tasks = [asyncio.create_task(one(i)) for i in range(count)]
    await all_settled.wait()
    why = ",".join(f"{k}:{v}" for k, v in failures.items()) or "-"
    print(f"OPEN {opened} {count - opened} {why}", flush=True)
    _, pending = await asyncio.wait(tasks, timeout=update_timeout)
    first = min(stamps) if stamps else 0.0
    last = max(stamps) if stamps else 0.0
    print(f"DONE {first:.6f} {last:.6f} {len(stamps)}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for task in pending:
        task.cancel()
    for writer in writers:
        writer.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.edge_sse_client")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--cookies", default="")
    parser.add_argument("--cookie-offset", type=int, default=0)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--open-concurrency", type=int, default=100)
    parser.add_argument("--update-timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    import uvloop

    from bench.edge_serve import raise_open_files

    raise_open_files()
    cookies = read_cookies(args.cookies)[args.cookie_offset : args.cookie_offset + args.count] if args.cookies else []
    uvloop.run(_main(args.port, args.path, cookies, args.count, args.open_concurrency, args.update_timeout))


if __name__ == "__main__":
    main()
