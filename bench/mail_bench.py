"""The mailer's sending: messages per second rendered (two tickets, two QR
images each) and handed to a local relay by one process, against the
relay's own accept rate (a pre-rendered message sent as fast as it takes
it) measured in the same run; rendering one message and one QR image,
against segno's own mask choice and PNG writer (the mailer's path before);
then a crowd through a relay paced at BOXOFFICE_MAIL_RATE in Redis (the
pace every mailer shares): how long N messages, each rendered as it is
sent, take, and that none is lost.

The relay is aiosmtpd on loopback in a thread of this process, without
TLS (the cost measured is the mailer's). Stores are not involved but the
pace's Redis (``REDIS_URL``, else an embedded one): the delivery records'
cost is a Postgres write before and after each send.

Run: ``python -m bench.mail_bench [--messages 300] [--crowd 1000] [--rate 100]``
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import socket
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from email.message import Message
from pathlib import Path

import segno
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from bench.common import Row, report
from boxoffice.clock import SystemClock
from boxoffice.embedded import EmbeddedRedis
from boxoffice.redis import create_client
from mail_svc.adapters.pace import SharedPace
from mail_svc.adapters.relays import SmtpRelay
from mail_svc.config import SmtpConfig
from mail_svc.model import BookingMail, EventInfo, Kind, TicketLine
from mail_svc.qr import qr_png
from mail_svc.render import Renderer

_CONCURRENCY = 8


class _Counter:
    def __init__(self) -> None:
        self.accepted = 0
        self._lock = threading.Lock()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with self._lock:
            self.accepted += 1
        return "250 OK"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _code(n: int, unit: int) -> str:
    # As long as a signed ticket code (275 characters), and as random to a mask.
    return f"TKT-{n:08d}-{unit}-" + os.urandom(196).hex()[:260]


def _booking(n: int) -> BookingMail:
    return BookingMail(
        hold_id=f"00000000-0000-4000-8000-{n:012d}",
        event=EventInfo(1, "Bench night", "CONCERT", datetime(2027, 1, 1, 19, tzinfo=UTC), "Europe/Lisbon", "Hall", ""),
        tickets=tuple(TicketLine(u, _code(n, u), "A", f"A-{u}") for u in (1, 2)),
        amount_minor=9000,
        currency="EUR",
    )


def _segno_png(code: str) -> bytes:
    """The mailer's QR image before: segno's best of eight masks, its PNG writer."""
    buffer = io.BytesIO()
    segno.make(code, error="m", micro=False).save(buffer, kind="png", scale=6, border=4)
    return buffer.getvalue()


def _each_ms(count: int, work: Callable[[int], object]) -> float:
    start = time.perf_counter()
    for n in range(count):
        work(n)
    return (time.perf_counter() - start) * 1000 / count


async def _timed(count: int, send: Callable[[int], Awaitable[None]]) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(count):
        queue.put_nowait(n)

    async def worker() -> None:
        while not queue.empty():
            await send(queue.get_nowait())

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(_CONCURRENCY)))
    return time.perf_counter() - start


async def main(messages: int, crowd: int, rate: float, redis_url: str) -> None:
    counter = _Counter()
    port = _port()
    controller = Controller(counter, hostname="127.0.0.1", port=port)
    controller.start()
    redis = create_client(redis_url)
    try:
        config = SmtpConfig("127.0.0.1", port, False, None, None, None, 30.0)
        renderer = Renderer(mail_from="bench@boxoffice.example", tickets_url="https://x.example/e/{event_id}")
        now = datetime.now(UTC)

        def render(n: int) -> Message:
            return renderer.render(
                _booking(n), Kind.TICKETS, language="vi", to="fan@example.test", message_id=f"<b-{n}@x>", now=now
            )

        # The relay's own rate: one pre-rendered message, as fast as it takes it.
        fixed = render(0)
        raw = SmtpRelay(config, connections=_CONCURRENCY)

        async def send_fixed(n: int) -> None:
            await raw.send(fixed, "fan@example.test")

        relay_seconds = await _timed(messages, send_fixed)

        # The mailer's: render each (templates, two QR PNGs), then send.
        async def render_and_send(n: int) -> None:
            await raw.send(render(n), "fan@example.test")

        mailer_seconds = await _timed(messages, render_and_send)
        await raw.close()
        samples = min(messages, 100)
        render_ms = _each_ms(samples, render)
        codes = [_code(n, 1) for n in range(samples)]
        qr_ms = _each_ms(samples, lambda n: qr_png(codes[n]))
        segno_ms = _each_ms(samples, lambda n: _segno_png(codes[n]))

        # A crowd through a relay paced at `rate` messages a second, shared in Redis.
        before = counter.accepted
        paced = SharedPace(SmtpRelay(config, connections=_CONCURRENCY), redis, rate, SystemClock())

        async def send_paced(n: int) -> None:
            await paced.send(render(10_000 + n), "fan@example.test")

        crowd_seconds = await _timed(crowd, send_paced)
        await paced.close()
        delivered = counter.accepted - before
    finally:
        await redis.aclose()
        controller.stop()
    report(
        f"mailer sending, one process, {_CONCURRENCY} connections to an aiosmtpd relay on loopback",
        [
            Row("relay accepts a pre-rendered message", messages / relay_seconds, "/s"),
            Row("rendered (2 tickets, 2 QR PNGs) and sent", messages / mailer_seconds, "/s", messages / relay_seconds),
            Row("rendering one message", render_ms, "ms"),
            Row("one QR PNG (mask 2, our PNG writer) vs segno's own", qr_ms, "ms", segno_ms, better="lower"),
            Row(
                f"{crowd} rendered at BOXOFFICE_MAIL_RATE={rate:g}: seconds",
                crowd_seconds,
                "s",
                crowd / rate,
                better="lower",
            ),
            Row(f"{crowd} rendered at BOXOFFICE_MAIL_RATE={rate:g}: delivered", delivered, "", crowd),
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--crowd", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0)
    arguments = parser.parse_args()
    url = os.environ.get("REDIS_URL")
    if url:
        asyncio.run(main(arguments.messages, arguments.crowd, arguments.rate, url))
    else:
        with tempfile.TemporaryDirectory() as folder:
            embedded = EmbeddedRedis(Path(folder) / "redis")
            try:
                asyncio.run(main(arguments.messages, arguments.crowd, arguments.rate, embedded.start()))
            finally:
                embedded.stop()
