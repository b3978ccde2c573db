"""``boxoffice simulate``: a synthetic crowd driving the real mesh through
the edge's HTTP API, then the on-sale report; ``--model`` predicts the same
scenario with the discrete-event model instead; ``--compare`` runs both on
one scenario and prints predicted against measured.

    boxoffice simulate [--fans N] [--seats N] [--rate N] [--max-active N] ...
    boxoffice simulate --model [--fans 2000000 --seats 50000]
    boxoffice simulate --compare [--fans 1000 --seats 200]

The crowd (``--edge-url``, default http://127.0.0.1:8080) signs fans in
with the edge's development sign-in, so it runs against ``boxoffice up`` on
embedded stores (or with ``BOXOFFICE_EDGE_DEV_SIGNIN=true``); each fan
sends its own X-Forwarded-For address, which the edge believes only from a
trusted proxy: start the mesh with ``BOXOFFICE_EDGE_TRUSTED_PROXIES=127.0.0.1/32``
(else every fan shares 127.0.0.1's rate limit). The event and its waiting
room are created over the admin API as ``boxoffice admin`` does (the
operator's certificate: ``--ca-file``, ``--cert-file``, ``--key-file`` or
``BOXOFFICE_TLS_*_FILE``); the report reads ``DATABASE_URL``.

What a fan does (``simulate_scenario``): arrives on the scenario's curve
(a share before the opening, the pre-queue; the rest in a surge after it),
signs in and joins; a bot joins many times at once and never comes back;
a fan who does not show never polls again; the others poll as the edge's
``pollAfter`` says until admitted, think, hold their tickets (best
available; one ticket if not enough are left), think, pay (a declined card
releases the hold and gives up), confirm, and end their session. When every
seat is sold the operator's part pauses the waiting room (as an operator
closes the sale) and the fans still waiting leave.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

import httpx

from boxoffice_cli import report as report_cli
from boxoffice_cli.simulate_scenario import BadScenario, FanPlan, Scenario, plan
from gen.boxoffice.booking.v1 import booking_admin_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_admin_service_pb2_grpc as bpb_grpc
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as qpb_grpc

OK, FAILED, USAGE = 0, 1, 2
ADMITTED = "QUEUE_STATE_ADMITTED"
WAITING = "QUEUE_STATE_WAITING"
# Requests in flight at once from the whole crowd.
IN_FLIGHT = 256
CALL_SECONDS = 30.0


class Dialer(Protocol):
    """Something that makes a gRPC stub (a ClientChannel, a test's client)."""

    def stub(self, factory: Callable[[Any], Any]) -> Any: ...


async def create_event(queue: Dialer, booking: Dialer, scenario: Scenario, event_id: int, opens_at: float) -> None:
    """The scenario's event (one seated section of ``seats`` seats) and its
    waiting room, over the admin API."""
    event = bpb.BookingAdminServiceCreateEventRequest(
        event_id=event_id,
        display_name=f"Simulated on-sale {event_id}",
        kind=bpb.MANAGED_EVENT_KIND_CONCERT,
        max_seats_per_customer=max(n for n, _ in scenario.tickets_per_order),
    )
    event.starts_at.FromSeconds(int(opens_at) + 30 * 86_400)
    event.hold_ttl.FromSeconds(300)
    section = event.sections.add(section_id="A", display_name="Stalls", kind=bpb.MANAGED_SECTION_KIND_SEATED)
    section.price.currency_code = scenario.currency
    section.price.amount_minor = scenario.price_minor
    admin = booking.stub(bpb_grpc.BookingAdminServiceStub)
    await admin.CreateEvent(event, timeout=CALL_SECONDS)
    rows = []
    left, number = scenario.seats, 0
    while left > 0:
        count = min(scenario.row_seats, left)
        rows.append(bpb.InventoryRow(section_id="A", row_label=f"R{number}", first_seat_number=1, seat_count=count))
        left -= count
        number += 1
    for start in range(0, len(rows), 500):
        await admin.LoadInventory(
            bpb.BookingAdminServiceLoadInventoryRequest(event_id=event_id, rows=rows[start : start + 500]),
            timeout=CALL_SECONDS * 2,
        )
    room = qpb.WaitingRoom(
        event_id=event_id,
        admission_rate_per_second=scenario.admission_rate,
        max_active_shoppers=scenario.max_active,
    )
    room.opens_at.FromMilliseconds(int(opens_at * 1000))
    room.pre_queue_window.FromSeconds(int(scenario.opens_in_seconds) + 60)
    room.session_length.FromSeconds(scenario.session_seconds)
    room.claim_grace.FromSeconds(scenario.claim_grace_seconds)
    room.token_ttl.FromSeconds(min(scenario.session_seconds, 300))
    await queue.stub(qpb_grpc.QueueAdminServiceStub).CreateWaitingRoom(
        qpb.CreateWaitingRoomRequest(config=room), timeout=CALL_SECONDS
    )


async def pause_room(queue: Dialer, event_id: int) -> None:
    """Stop admitting (the sale is over)."""
    await queue.stub(qpb_grpc.QueueAdminServiceStub).PauseWaitingRoom(
        qpb.PauseWaitingRoomRequest(event_id=event_id), timeout=CALL_SECONDS
    )


@dataclass
class Tally:
    """What the crowd saw (the report's figures come from Postgres)."""

    fans: int = 0
    arrived: int = 0
    joins_refused: int = 0
    admitted: int = 0
    held: int = 0
    declined: int = 0
    paid: int = 0
    tickets: int = 0
    sold_out_answers: int = 0
    left_waiting: int = 0
    errors: int = 0
    done: int = 0
    error_samples: list[str] = dataclasses.field(default_factory=list)

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 10:
            self.error_samples.append(what)


class ProgressBar:
    """The crowd's progress on one line (redrawn on a terminal)."""

    def __init__(self, out: TextIO, tally: Tally, seats: int) -> None:
        self._out = out
        self._tally = tally
        self._seats = seats
        self._tty = out.isatty()
        self._last = 0.0

    def draw(self, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < (0.2 if self._tty else 5.0):
            return
        self._last = now
        t = self._tally
        share = t.tickets / self._seats if self._seats else 1.0
        bar = "#" * round(30 * share)
        line = (
            f"[{bar:<30}] {t.tickets:,}/{self._seats:,} seats sold | fans {t.arrived:,}/{t.fans:,} arrived, "
            f"{t.admitted:,} admitted, {t.done:,} done | declined {t.declined:,}, refused joins {t.joins_refused:,}"
        )
        if self._tty:
            self._out.write("\r" + line + ("\n" if final else ""))
        else:
            self._out.write(line + "\n")
        self._out.flush()


def _duration(text: object, default: float) -> float:
    if isinstance(text, str) and text.endswith("s"):
        try:
            return float(text[:-1])
        except ValueError:
            return default
    return default


class Crowd:
    """The fans of one run against one edge."""

    def __init__(
        self,
        edge_url: str,
        event_id: int,
        scenario: Scenario,
        *,
        started_at: float,
        run_id: str,
        out: TextIO | None = None,
        on_sold_out: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        self._url = edge_url
        self._event = event_id
        self._scenario = scenario
        self._started = started_at
        self._run = run_id
        self._gate = asyncio.Semaphore(IN_FLIGHT)
        self.tally = Tally(fans=scenario.fans)
        self._sold_out = asyncio.Event()
        self._bar = ProgressBar(out, self.tally, scenario.seats) if out is not None else None
        self._on_sold_out = on_sold_out
        self._closing: asyncio.Task[None] | None = None
        self._transport = httpx.AsyncHTTPTransport()

    async def _call(self, client: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with self._gate:
            return await client.request(method, path, **kwargs)

    async def run(self) -> Tally:
        fans = plan(self._scenario)
        limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
        self._transport = httpx.AsyncHTTPTransport(limits=limits)
        tasks = [asyncio.create_task(self._fan(f)) for f in fans]
        drawing = asyncio.create_task(self._draw())
        try:
            await asyncio.gather(*tasks)
            if self._closing is not None:
                await self._closing
        finally:
            drawing.cancel()
            await self._transport.aclose()
            if self._bar is not None:
                self._bar.draw(final=True)
        return self.tally

    async def _draw(self) -> None:
        while self._bar is not None:
            self._bar.draw()
            await asyncio.sleep(0.2)

    def _address(self, fan: FanPlan) -> str:
        if fan.bot:
            return f"10.250.0.{1 + fan.index % 4}"  # bots share a few addresses
        return f"10.{(fan.index >> 16) & 255}.{(fan.index >> 8) & 255}.{fan.index & 255}"

    async def _fan(self, fan: FanPlan) -> None:
        delay = self._started + fan.arrives_at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        # A client per fan (its cookies, its address) on the crowd's one
        # connection pool; closing it would close the pool, so it is left to go.
        client = httpx.AsyncClient(
            base_url=self._url,
            timeout=CALL_SECONDS,
            headers={"X-Forwarded-For": self._address(fan)},
            transport=self._transport,
        )
        try:
            await self._visit(client, fan)
        except httpx.HTTPError as err:
            self.tally.error(f"fan {fan.index}: {type(err).__name__}: {err}")
        finally:
            self.tally.done += 1

    async def _visit(self, client: httpx.AsyncClient, fan: FanPlan) -> None:
        t = self.tally
        signed = await self._call(client, "POST", "/v1/session", json={"name": f"sim-{self._run}-{fan.index}"})
        if signed.status_code != 200:
            t.error(f"sign-in {signed.status_code}: {signed.text[:200]}")
            return
        t.arrived += 1
        base = f"/v1/events/{self._event}"
        joined = False
        for _ in range(self._scenario.bot_joins if fan.bot else 1):
            reply = await self._call(client, "POST", f"{base}/queue:join", json={})
            if reply.status_code == 200:
                joined = True
            elif reply.status_code == 429:
                t.joins_refused += 1
            else:
                t.error(f"join {reply.status_code}: {reply.text[:200]}")
        if not joined or not fan.shows:
            return  # a bot or a fan who never comes back
        first = True
        while True:
            if self._sold_out.is_set():
                await self._call(client, "POST", f"{base}/queue:leave", json={})
                t.left_waiting += 1
                return
            reply = await self._call(client, "GET", f"{base}/queue/position")
            if reply.status_code != 200:
                t.error(f"position {reply.status_code}: {reply.text[:200]}")
                return
            position = reply.json()["position"]
            if position["state"] == ADMITTED:
                break
            if position["state"] != WAITING:
                return
            wait = _duration(position.get("pollAfter"), 5.0)
            if first:
                # Fans' polls are spread over the interval, not in step.
                wait *= 0.5 + fan.poll_phase
                first = False
            await self._sleep_or_sold_out(wait)
        t.admitted += 1
        token = position.get("accessToken")
        headers = {"Boxoffice-Access-Token": token} if token else {}
        await asyncio.sleep(fan.think)
        hold = await self._hold(client, fan.tickets, headers)
        if hold is None and fan.tickets > 1 and not self._sold_out.is_set():
            hold = await self._hold(client, 1, headers)
        if hold is None:
            await self._call(client, "POST", f"{base}/queue:leave", json={})
            return
        t.held += 1
        await asyncio.sleep(fan.pay)
        hold_id, seats = str(hold["holdId"]), int(hold.get("quantity") or len(hold.get("seats", [])) or 1)
        card = "pm_card_declined" if fan.declined else "pm_card_ok"
        started = await self._call(
            client, "POST", f"/v1/holds/{hold_id}/payment", json={"paymentMethod": card}, headers=headers
        )
        state = started.json().get("payment", {}).get("state", "") if started.status_code == 200 else ""
        if state not in ("PAYMENT_STATE_DECLINED", "PAYMENT_STATE_FAILED") and started.status_code == 200:
            payment_id = started.json()["payment"]["paymentId"]
            confirmed = await self._call(
                client,
                "POST",
                f"/v1/payments/{payment_id}:confirm",
                headers={**headers, "Idempotency-Key": f"sim-{uuid.uuid4().hex}"},
            )
            state = confirmed.json().get("payment", {}).get("state", "") if confirmed.status_code == 200 else ""
        if state == "PAYMENT_STATE_SUCCEEDED":
            t.paid += 1
            t.tickets += seats
            if t.tickets >= self._scenario.seats and not self._sold_out.is_set():
                self._sold_out.set()
                if self._on_sold_out is not None:
                    self._closing = asyncio.create_task(self._on_sold_out())
        else:
            t.declined += 1
            await self._call(client, "DELETE", f"/v1/holds/{hold_id}", headers=headers)
        await self._call(client, "POST", f"{base}/queue:leave", json={})

    async def _sleep_or_sold_out(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._sold_out.wait(), timeout=seconds)
        except TimeoutError:
            pass

    async def _hold(self, client: httpx.AsyncClient, quantity: int, headers: Mapping[str, str]) -> Any:
        reply = await self._call(
            client,
            "POST",
            f"/v1/events/{self._event}/holds",
            json={"bestAvailable": {"sectionId": "A", "quantity": quantity}},
            headers=dict(headers),
        )
        if reply.status_code == 200:
            return reply.json()["hold"]
        if reply.status_code == 429 and "SOLD_OUT" in reply.text:
            self.tally.sold_out_answers += 1
        elif reply.status_code != 429:
            self.tally.error(f"hold {reply.status_code}: {reply.text[:200]}")
        return None


@dataclass(frozen=True, slots=True)
class Measured:
    """The real run's figures the model is checked against (from the report)."""

    sold_out_after_seconds: float | None
    median_wait_seconds: float | None
    report: dict[str, Any]


async def settled_report(database_url: str, event_id: int, *, seconds: float = 30.0) -> dict[str, Any]:
    """The report once the lifecycle recorder has caught up (two reads a
    recorder interval apart agree)."""
    previous: dict[str, Any] | None = None
    deadline = time.monotonic() + seconds
    while True:
        found = await asyncio.to_thread(report_cli.read_report, database_url, event_id)
        if previous is not None and found["funnel"] == previous["funnel"]:
            return found
        if time.monotonic() > deadline:
            return found
        previous = found
        await asyncio.sleep(1.5)


def measured_of(report: dict[str, Any]) -> Measured:
    sold_out = [s["sold_out_after_seconds"] for s in report["tickets"]["sections"]]
    return Measured(
        sold_out_after_seconds=None if None in sold_out or not sold_out else max(sold_out),
        median_wait_seconds=report["wait_seconds"]["p50"],
        report=report,
    )


async def run_real(
    scenario: Scenario,
    *,
    edge_url: str,
    queue: Dialer,
    booking: Dialer,
    database_url: str,
    out: TextIO | None,
    event_id: int | None = None,
) -> tuple[int, Tally, Measured]:
    """Create the event, run the crowd, and read the report."""
    event_id = event_id or (10**9 + random.SystemRandom().randrange(10**11))
    started = time.time() + 2.0
    await create_event(queue, booking, scenario, event_id, started + scenario.opens_in_seconds)
    crowd = Crowd(
        edge_url,
        event_id,
        scenario,
        started_at=started,
        run_id=uuid.uuid4().hex[:8],
        out=out,
        on_sold_out=lambda: pause_room(queue, event_id),
    )
    tally = await crowd.run()
    report = await settled_report(database_url, event_id)
    return event_id, tally, measured_of(report)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} s"


def comparison_lines(predicted_sold_out: float | None, predicted_wait: float | None, measured: Measured) -> list[str]:
    """The model against the real run, with the relative error of each."""

    def error(p: float | None, m: float | None) -> str:
        if p is None or m is None or m == 0:
            return "-"
        return f"{(p - m) / m:+.0%}"

    return [
        f"{'':<22}{'predicted':>12}{'measured':>12}{'error':>8}",
        f"{'sell-out time':<22}{_seconds(predicted_sold_out):>12}{_seconds(measured.sold_out_after_seconds):>12}"
        f"{error(predicted_sold_out, measured.sold_out_after_seconds):>8}",
        f"{'median wait':<22}{_seconds(predicted_wait):>12}{_seconds(measured.median_wait_seconds):>12}"
        f"{error(predicted_wait, measured.median_wait_seconds):>8}",
    ]


def _parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="boxoffice simulate", description="A synthetic on-sale: real or modelled.")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--model", action="store_true", help="predict with the discrete-event model (no mesh)")
    mode.add_argument("--compare", action="store_true", help="run the crowd and the model, print both")
    d = Scenario()
    p.add_argument("--fans", type=int, default=None, help=f"fans (default {d.fans:,}; --model 2,000,000)")
    p.add_argument("--seats", type=int, default=None, help=f"seats (default {d.seats:,}; --model 50,000)")
    p.add_argument("--rate", type=int, default=None, help="admissions per second (default: scaled with the seats)")
    p.add_argument("--max-active", type=int, default=None, help="shoppers at once (default: scaled with the seats)")
    p.add_argument("--opens-in", type=float, default=d.opens_in_seconds, help="seconds to the opening")
    p.add_argument("--surge", type=float, default=d.surge_seconds, help="mean seconds of the arrivals after opening")
    p.add_argument("--pre-queue-share", type=float, default=d.pre_queue_share)
    p.add_argument("--show-rate", type=float, default=d.show_rate)
    p.add_argument("--declined-share", type=float, default=d.declined_share)
    p.add_argument("--bot-share", type=float, default=d.bot_share)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--pods", type=int, default=1, help="--model: pods of each service (the capacities scale)")
    p.add_argument("--edge-url", default=environ.get("BOXOFFICE_SIMULATE_EDGE_URL", "http://127.0.0.1:8080"))
    p.add_argument("--queue-addr", default=environ.get("BOXOFFICE_QUEUE_ADDR", "127.0.0.1:50051"))
    p.add_argument("--booking-addr", default=environ.get("BOXOFFICE_BOOKING_ADDR", "127.0.0.1:50052"))
    p.add_argument("--ca-file", default=environ.get("BOXOFFICE_TLS_CA_FILE"))
    p.add_argument("--cert-file", default=environ.get("BOXOFFICE_TLS_CERT_FILE"))
    p.add_argument("--key-file", default=environ.get("BOXOFFICE_TLS_KEY_FILE"))
    p.add_argument("--database-url", default=environ.get("DATABASE_URL"))
    p.add_argument("--report", help="write the HTML report of the real run to this file")
    return p


def scenario_of(args: argparse.Namespace) -> Scenario:
    fans = args.fans if args.fans is not None else (2_000_000 if args.model else (1000 if args.compare else 5000))
    seats = args.seats if args.seats is not None else (50_000 if args.model else (200 if args.compare else 1000))
    base = dataclasses.replace(
        Scenario(),
        opens_in_seconds=args.opens_in,
        surge_seconds=args.surge,
        pre_queue_share=args.pre_queue_share,
        show_rate=args.show_rate,
        declined_share=args.declined_share,
        bot_share=args.bot_share,
        seed=args.seed,
    ).scaled(fans, seats)
    changes: dict[str, Any] = {}
    if args.rate is not None:
        changes["admission_rate"] = args.rate
    if args.max_active is not None:
        changes["max_active"] = args.max_active
    scenario = dataclasses.replace(base, **changes)
    scenario.check()
    return scenario


async def _real(args: argparse.Namespace, scenario: Scenario, out: TextIO, err: TextIO) -> Measured:
    from boxoffice.tls import CertFiles, ClientChannel

    tls = (args.ca_file, args.cert_file, args.key_file)
    files = CertFiles(Path(args.ca_file), Path(args.cert_file), Path(args.key_file)) if all(tls) else None
    async with ClientChannel(args.queue_addr, files) as queue, ClientChannel(args.booking_addr, files) as booking:
        event_id, tally, measured = await run_real(
            scenario,
            edge_url=args.edge_url,
            queue=queue,
            booking=booking,
            database_url=args.database_url,
            out=err,
        )
    out.write(
        f"event {event_id}: {tally.arrived:,} fans arrived, {tally.admitted:,} admitted and came back, "
        f"{tally.paid:,} orders, {tally.tickets:,} tickets, {tally.declined:,} declined, "
        f"{tally.joins_refused:,} joins refused, {tally.errors:,} errors\n"
    )
    for sample in tally.error_samples:
        out.write(f"  error: {sample}\n")
    if args.report:
        html = report_cli.render(measured.report, "html")
        await asyncio.to_thread(Path(args.report).write_text, html, encoding="utf-8")
        out.write(f"report: {args.report}\n")
    else:
        out.write(f"report: boxoffice report {event_id}\n")
    out.write("\n".join(summary_lines(measured.report)) + "\n")
    return measured


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The report's main figures as text (the whole report: boxoffice report)."""
    f, w, t, r = report["funnel"], report["wait_seconds"], report["tickets"], report["reconciliation"]
    sold_out = [s["sold_out_after_seconds"] for s in t["sections"]]
    refusals = {**report["refusals"]["queue_joins"], **report["refusals"]["payments"]}
    return [
        f"report of event {report['event_id']}:",
        f"  funnel        {f['fans_joined']:,} joined ({f['pre_queue_at_opening']:,} in the pre-queue), "
        f"{f['fans_admitted']:,} admitted, {f['claimed']:,} claimed, {f['admissions_never_claimed']:,} never claimed, "
        f"{f['fans_held']:,} held, {f['fans_paid']:,} paid; {f['left_while_waiting']['count']:,} left and "
        f"{f['dropped_while_waiting']['count']:,} dropped while waiting",
        f"  wait          p50 {_seconds(w['p50'])}, p90 {_seconds(w['p90'])}, p99 {_seconds(w['p99'])}",
        f"  sold out      after {_seconds(max(sold_out) if sold_out and None not in sold_out else None)}, "
        f"{t['seats_sold']:,} seats, {t['valid_tickets']:,} valid tickets",
        "  refusals      " + (", ".join(f"{k} {v:,}" for k, v in refusals.items()) or "none"),
        "  reconciliation "
        + (
            "balanced"
            if r["ok"]
            else "MISMATCH: "
            + ", ".join(f"{line['line']} {line['mismatches']:,}" for line in r["lines"] if not line["ok"])
        ),
    ]


def main(argv: Sequence[str], environ: Mapping[str, str], out: TextIO | None = None) -> int:
    """Run ``boxoffice simulate ARGV...``; the exit code."""
    from boxoffice_cli import simulate_model

    out = out or sys.stdout
    p = _parser(environ)
    try:
        args = p.parse_args(list(argv))
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else USAGE
    try:
        scenario = scenario_of(args)
        if args.pods < 1:
            raise BadScenario("--pods must be at least 1")
    except BadScenario as bad:
        print(f"boxoffice simulate: error: {bad}", file=sys.stderr)
        return USAGE
    if args.model:
        prediction = simulate_model.predict(scenario, simulate_model.Capacities().scaled(args.pods))
        out.write("\n".join(simulate_model.describe(scenario, prediction)) + "\n")
        return OK
    if not args.database_url:
        print(
            "boxoffice simulate: error: set DATABASE_URL or give --database-url (the report reads it)", file=sys.stderr
        )
        return USAGE
    try:
        measured = asyncio.run(_real(args, scenario, out, sys.stderr))
    except httpx.HTTPError as failed:
        print(f"boxoffice simulate: cannot reach the edge: {failed}", file=sys.stderr)
        return FAILED
    except Exception as failed:  # a gRPC or Postgres failure, told plainly
        print(f"boxoffice simulate: failed: {type(failed).__name__}: {failed}", file=sys.stderr)
        return FAILED
    if args.compare:
        prediction = simulate_model.predict(scenario, simulate_model.Capacities())
        out.write(
            "\n".join(comparison_lines(prediction.sold_out_after_seconds, prediction.median_wait_seconds, measured))
        )
        out.write("\n")
    return OK
