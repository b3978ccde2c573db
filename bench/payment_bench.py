"""PaymentService throughput: confirms per second, each figure next to a
baseline measured in the same run (on a shared 2-core machine only ratios
within one run mean much).

1. ConfirmPayment of a captured payment (idempotency key claimed and
   stored, BookingService.ConfirmHold over gRPC, payment row moved) vs
   BookingService.ConfirmHold called straight just before it (the booking
   part alone; goal >= 0.5), and the bare grpc.aio echo.
2. ConfirmPayment replayed with a used key (the stored answer) vs echo.
3. StartPayment (GetHold, ExtendHold, payment row, sandbox charge) vs echo.

Run: ``python -m bench.payment_bench [--seconds 5] [--concurrency 32] [--orders 1500]``
Postgres: ``BOXOFFICE_BENCH_DATABASE_URL`` (default the local server as
postgres; the bench creates and drops its own database); Redis:
``BOXOFFICE_BENCH_REDIS_URL`` (default database 12 of the local server).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
import psycopg
from google.protobuf import duration_pb2, timestamp_pb2

from bench.common import (
    LoadFigures,
    MeshStub,
    Row,
    closed_loop,
    echo_call,
    echo_server,
    report,
    server_process,
)
from booking_svc import app as booking_app
from boxoffice import caller, db
from boxoffice.clock import SystemClock
from boxoffice.config import Env, TokenConfig
from boxoffice.tokens import TokenSigner
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from payment_svc import app as payment_app

EVENT_ID = 1


@contextlib.contextmanager
def bench_database(admin_url: str) -> Iterator[str]:
    """A fresh database for the run, dropped afterwards."""
    name = f"boxoffice_bench_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    parts = urlsplit(admin_url)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


async def prepare_database(url: str) -> None:
    await db.migrate(url, [*booking_app.migrations(), *payment_app.migrations()])


async def create_event(booking: Any) -> None:
    """The benchmark's event, through BookingService: one standing section
    large enough for every order."""
    starts_at = timestamp_pb2.Timestamp()
    starts_at.FromDatetime(datetime.now(UTC) + timedelta(days=30))
    await booking.CreateEvent(
        bpb.CreateEventRequest(
            event_id=EVENT_ID,
            display_name="payment bench",
            kind=bpb.EVENT_KIND_CONCERT,
            starts_at=starts_at,
            hold_ttl=duration_pb2.Duration(seconds=3600),
            max_seats_per_customer=4,
            sections=[
                bpb.SectionSpec(
                    section_id="GA",
                    display_name="standing",
                    kind=bpb.SECTION_KIND_GENERAL_ADMISSION,
                    capacity=1_000_000,
                    price=bpb.Money(currency_code="EUR", amount_minor=5000),
                )
            ],
        ),
        timeout=60,
    )


async def _parallel(calls: Sequence[Callable[[], Awaitable[Any]]], concurrency: int = 64) -> list[Any]:
    """Run setup calls with bounded concurrency, keeping their order."""
    results: list[Any] = [None] * len(calls)
    cursor = 0

    async def worker() -> None:
        nonlocal cursor
        while cursor < len(calls):
            index = cursor
            cursor += 1
            results[index] = await calls[index]()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


async def main(seconds: float, concurrency: int, orders: int) -> None:
    admin = os.environ.get("BOXOFFICE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    redis_url = os.environ.get("BOXOFFICE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
    tokens = TokenConfig.from_env(Env(os.environ))
    signer = TokenSigner(tokens.keys, tokens.active_kid, SystemClock())

    def token(customer: int) -> str:
        return signer.issue(event_id=EVENT_ID, customer_id=f"bench-{customer}", ttl_seconds=3600)[0]

    with bench_database(admin) as url:
        await prepare_database(url)
        with echo_server() as echo_proc:
            async with grpc.aio.insecure_channel(echo_proc.address) as channel:
                echo = echo_call(channel)
                echo_figures = await closed_loop(
                    lambda n: echo(b"x" * 200), concurrency=concurrency, seconds=seconds, server_pid=echo_proc.pid
                )

        env = {"DATABASE_URL": url, "REDIS_URL": redis_url}
        with server_process(["-m", "bench.serve", "booking-svc"], env=env, role="booking") as booking_proc:
            # The sandbox answers at once and keeps its webhooks, so that the
            # figures measure the confirm path alone.
            payment_env = {
                **env,
                "BOXOFFICE_BOOKING_ADDR": booking_proc.address,
                "BOXOFFICE_SANDBOX_DELAY_SECONDS": "0",
                "BOXOFFICE_SANDBOX_WEBHOOK_MODE": "manual",
                "BOXOFFICE_RECONCILE_INTERVAL_SECONDS": "300",
            }
            with server_process(["-m", "bench.serve", "payment-svc"], env=payment_env, role="payment") as payment_proc:
                async with (
                    MeshStub(booking_proc.address, bpb_grpc.BookingServiceStub) as booking,
                    MeshStub(payment_proc.address, ppb_grpc.PaymentServiceStub) as payment,
                ):
                    await create_event(booking)
                    pids = {"booking": booking_proc.pid, "payment": payment_proc.pid}
                    figures = await _measure(booking, payment, token, seconds, concurrency, orders, pids)

    start, confirm, replay, confirm_hold = figures
    report(
        f"PaymentService, one server process each (payment, booking), {concurrency} concurrent calls, {seconds:g} s each",
        [
            Row("bare grpc.aio echo req/s (baseline)", echo_figures.rps, "/s"),
            Row("BookingService.ConfirmHold straight, req/s", confirm_hold.rps, "/s", echo_figures.rps, "reported"),
            Row("ConfirmPayment (first) confirms/s", confirm.rps, "/s", confirm_hold.rps, ">= 0.5 of ConfirmHold"),
            Row("ConfirmPayment p50 latency", confirm.p50_ms, "ms", confirm_hold.p50_ms, better="lower"),
            Row("ConfirmPayment p99 latency", confirm.p99_ms, "ms", confirm_hold.p99_ms, better="lower"),
            Row("ConfirmPayment replayed (stored answer) req/s", replay.rps, "/s", echo_figures.rps, "reported"),
            Row("StartPayment req/s", start.rps, "/s", echo_figures.rps, "reported"),
            Row("server CPU per echo (baseline)", echo_figures.server_cpu_us, "us"),
            Row(
                "server CPU per ConfirmHold (booking)",
                confirm_hold.server_cpu_us,
                "us",
                echo_figures.server_cpu_us,
                better="lower",
            ),
            Row(
                "server CPU per ConfirmPayment (payment's own)",
                confirm.server_cpu_us,
                "us",
                echo_figures.server_cpu_us,
                better="lower",
            ),
            Row(
                "server CPU per replayed ConfirmPayment",
                replay.server_cpu_us,
                "us",
                echo_figures.server_cpu_us,
                better="lower",
            ),
            Row(
                "server CPU per StartPayment (payment's own)",
                start.server_cpu_us,
                "us",
                echo_figures.server_cpu_us,
                better="lower",
            ),
            Row(
                "errors (start / confirm / replay / ConfirmHold)",
                start.errors + confirm.errors + replay.errors + confirm_hold.errors,
                "",
            ),
        ],
    )


async def _measure(
    booking: Any,
    payment: Any,
    token: Callable[[int], str],
    seconds: float,
    concurrency: int,
    orders: int,
    pids: dict[str, int],
) -> tuple[LoadFigures, LoadFigures, LoadFigures, LoadFigures]:
    """Holds made ahead: one set started during the StartPayment phase, one
    started ahead and confirmed during the ConfirmPayment phase, one
    confirmed straight at BookingService. Each figure carries the CPU per
    call of the server called (PaymentService's own, not booking's share)."""

    async def hold(customer: int) -> bpb.Hold:
        reply = await booking.HoldSeats(
            bpb.HoldSeatsRequest(
                access_token=token(customer),
                event_id=EVENT_ID,
                best_available=bpb.BestAvailableSelection(section_id="GA", quantity=1),
            ),
            timeout=60,
        )
        held: bpb.Hold = reply.hold
        return held

    def holding(customer: int) -> Callable[[], Awaitable[bpb.Hold]]:
        return lambda: hold(customer)

    async def start(customer: int, hold_: bpb.Hold) -> str:
        reply = await payment.StartPayment(
            ppb.StartPaymentRequest(access_token=token(customer), hold_id=hold_.hold_id, payment_method="pm_card_ok"),
            timeout=60,
        )
        payment_id: str = reply.payment.payment_id
        return payment_id

    def starting(customer: int, hold_: bpb.Hold) -> Callable[[], Awaitable[str]]:
        return lambda: start(customer, hold_)

    to_start = await _parallel([holding(c) for c in range(orders)])
    to_confirm = await _parallel([holding(orders + c) for c in range(orders)])
    straight = await _parallel([holding(2 * orders + c) for c in range(orders)])
    payments = await _parallel([starting(orders + c, h) for c, h in enumerate(to_confirm)], concurrency)
    # The edge asserts the fan a payment belongs to when it confirms it.
    asserts = {
        payment_id: ((caller.CUSTOMER_METADATA_KEY, f"bench-{orders + c}"),) for c, payment_id in enumerate(payments)
    }

    async def work(items: list[Any], n: int) -> Any:
        if n > len(items):  # out of prepared work: idle instead of spinning
            await asyncio.sleep(0.1)
            raise IndexError("no prepared work left")
        return items[n - 1]

    async def start_one(n: int) -> None:
        hold_ = await work(to_start, n)
        await start(n - 1, hold_)

    started = await closed_loop(start_one, concurrency=concurrency, seconds=seconds, server_pid=pids["payment"])

    async def confirm_hold_one(n: int) -> None:
        hold_ = await work(straight, n)
        await booking.ConfirmHold(
            bpb.ConfirmHoldRequest(
                hold_id=hold_.hold_id,
                idempotency_key=f"straight-{hold_.hold_id}",
                payment_id=str(uuid.uuid4()),
                amount_paid=hold_.amount,
            ),
            timeout=60,
        )

    confirm_hold = await closed_loop(
        confirm_hold_one, concurrency=concurrency, seconds=seconds, server_pid=pids["booking"]
    )
    confirmed: list[str] = []

    async def confirm_one(n: int) -> None:
        payment_id = await work(payments, n)
        await payment.ConfirmPayment(
            ppb.ConfirmPaymentRequest(payment_id=payment_id, idempotency_key=f"bench-{payment_id}"),
            metadata=asserts[payment_id],
            timeout=60,
        )
        confirmed.append(payment_id)

    confirm = await closed_loop(confirm_one, concurrency=concurrency, seconds=seconds, server_pid=pids["payment"])

    async def replay_one(n: int) -> None:
        payment_id = confirmed[n % len(confirmed)]
        await payment.ConfirmPayment(
            ppb.ConfirmPaymentRequest(payment_id=payment_id, idempotency_key=f"bench-{payment_id}"),
            metadata=asserts[payment_id],
            timeout=60,
        )

    replay = await closed_loop(replay_one, concurrency=concurrency, seconds=seconds, server_pid=pids["payment"])

    for name, figures in (("StartPayment", started), ("ConfirmPayment", confirm), ("ConfirmHold", confirm_hold)):
        if figures.errors:
            print(
                f"  note: {name} had {figures.errors} errors (ran out of the {orders} prepared orders? raise --orders)"
            )
    return started, confirm, replay, confirm_hold


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--orders", type=int, default=1500, help="orders prepared for each measured phase")
    args = parser.parse_args()
    asyncio.run(main(args.seconds, args.concurrency, args.orders))
