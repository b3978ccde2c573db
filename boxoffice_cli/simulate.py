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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx

from boxoffice_cli import report as report_cli
from boxoffice_cli.simulate_crowd import Crowd, Dialer, Tally, create_event, pause_room
from boxoffice_cli.simulate_scenario import BadScenario, Scenario

OK, FAILED, USAGE = 0, 1, 2


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
