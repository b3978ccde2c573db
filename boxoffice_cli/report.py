"""``boxoffice report EVENT_ID``: what happened at an event's on-sale, from
the durable records alone, and the reconciliation of its money, seats and
tickets.

    boxoffice report EVENT_ID [--format html|json|csv] [--output FILE]

An operator's tool: it reads Postgres (``DATABASE_URL``, or
``--database-url``) in one read-only transaction, as the database role of
that URL (give it a role with SELECT on the tables below; nothing is ever
written), and never calls the mesh. The figures come from:

- ``queue_lifecycle``: every change of a fan's state in the waiting room,
  copied from Redis by the queue's lifecycle recorder (so the last second
  or so of a running on-sale may not be in yet), and ``queue_refusals``
  (joins refused, per reason); ``queue_events`` (the opening);
- booking's ``holds``, ``sections``, ``section_totals`` and ``seats``;
- payment's ``payments``, ``refunds`` and ``tickets``;
- check-in's ``checkins`` and ``checkin_conflicts`` (the door);
- booking's ``waitlist_entries`` (the waiting list).

Exit codes: 0 done (whatever the reconciliation found), 2 a usage error or
an event without a waiting room, 1 Postgres could not be read.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

import psycopg

from boxoffice_cli.args import positive
from boxoffice_cli.report_reconciliation import reconciliation

OK, FAILED, USAGE = 0, 1, 2

# The wait histogram's bucket bounds (seconds); the last bucket is open.
WAIT_BUCKETS = (5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)
STATEMENT_TIMEOUT_MS = 60_000

Json = dict[str, Any]


class UnknownEvent(Exception):
    """The event has no waiting room (nothing to report)."""


def percentile(sorted_values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile of sorted values (None for none)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(share * len(sorted_values)))
    return float(sorted_values[rank - 1])


def distribution(values: Sequence[float]) -> Json:
    """Count, percentiles and histogram of waits in seconds."""
    ordered = sorted(values)
    buckets: list[Json] = []
    low = 0.0
    for bound in (*WAIT_BUCKETS, None):
        count = sum(1 for v in ordered if v >= low and (bound is None or v < bound))
        buckets.append({"from": low, "to": bound, "count": count})
        low = float(bound) if bound is not None else low
    return {
        "count": len(ordered),
        "p50": percentile(ordered, 0.50),
        "p90": percentile(ordered, 0.90),
        "p99": percentile(ordered, 0.99),
        "mean": (sum(ordered) / len(ordered)) if ordered else None,
        "max": ordered[-1] if ordered else None,
        "histogram": buckets,
    }


@dataclass(frozen=True, slots=True)
class Event:
    event_id: int
    opens_at: datetime


Params = Sequence[Any] | Mapping[str, Any]


def _rows(conn: psycopg.Connection[Any], sql: str, params: Params) -> list[tuple[Any, ...]]:
    return list(conn.execute(sql.encode(), params).fetchall())


def _one(conn: psycopg.Connection[Any], sql: str, params: Params) -> tuple[Any, ...]:
    row = conn.execute(sql.encode(), params).fetchone()
    assert row is not None
    return tuple(row)


# A fan's visit: each admitted, left or dropped entry with the join before it.
_VISITS = """
SELECT e.kind, e.customer_id,
       extract(epoch FROM e.at - greatest(j.at, %(opens)s))::float8 AS waited
  FROM queue_lifecycle e
  CROSS JOIN LATERAL (
        SELECT at FROM queue_lifecycle j
         WHERE j.event_id = e.event_id AND j.customer_id = e.customer_id AND j.kind = 'joined' AND j.idx < e.idx
         ORDER BY j.idx DESC LIMIT 1) j
 WHERE e.event_id = %(event)s AND e.kind IN ('admitted', 'left', 'dropped')
"""


def _funnel(conn: psycopg.Connection[Any], event: Event) -> tuple[Json, Json]:
    params = {"event": event.event_id, "opens": event.opens_at}
    counts = dict(
        _rows(
            conn,
            "SELECT kind, count(*) FROM queue_lifecycle WHERE event_id = %(event)s GROUP BY kind",
            params,
        )
    )
    fans, pre = _one(
        conn,
        """
        SELECT count(DISTINCT customer_id), count(DISTINCT customer_id) FILTER (WHERE pre_queue)
          FROM queue_lifecycle WHERE event_id = %(event)s AND kind = 'joined'
        """,
        params,
    )
    admitted_fans, by_net = _one(
        conn,
        """
        SELECT count(DISTINCT customer_id), count(*) FILTER (WHERE detail = 'net')
          FROM queue_lifecycle WHERE event_id = %(event)s AND kind = 'admitted'
        """,
        params,
    )
    arrivals = [
        {"minute": int(minute), "joined": int(n)}
        for minute, n in _rows(
            conn,
            """
            SELECT floor(extract(epoch FROM at - %(opens)s) / 60)::bigint AS minute, count(*)
              FROM queue_lifecycle WHERE event_id = %(event)s AND kind = 'joined'
             GROUP BY 1 ORDER BY 1
            """,
            params,
        )
    ]
    ended = {
        str(detail or "unspecified"): int(n)
        for detail, n in _rows(
            conn,
            """
            SELECT detail, count(*) FROM queue_lifecycle
             WHERE event_id = %(event)s AND kind = 'ended' GROUP BY 1 ORDER BY 1
            """,
            params,
        )
    }
    waits: dict[str, list[float]] = {"admitted": [], "left": [], "dropped": []}
    for kind, _, waited in _rows(conn, _VISITS, params):
        waits[str(kind)].append(max(0.0, float(waited)))
    held, paid = _one(
        conn,
        """
        SELECT count(DISTINCT customer_id), count(DISTINCT customer_id) FILTER (WHERE confirmed_at IS NOT NULL)
          FROM holds WHERE event_id = %(event)s
        """,
        params,
    )

    def share(part: int, whole: int) -> float | None:
        return part / whole if whole else None

    funnel = {
        "opens_at": event.opens_at.isoformat(),
        "arrivals_per_minute": arrivals,
        "joins": int(counts.get("joined", 0)),
        "fans_joined": int(fans),
        "pre_queue_at_opening": int(pre),
        "left_while_waiting": {"count": int(counts.get("left", 0)), "waited_seconds": distribution(waits["left"])},
        "dropped_while_waiting": {
            "count": int(counts.get("dropped", 0)),
            "waited_seconds": distribution(waits["dropped"]),
        },
        "admitted": int(counts.get("admitted", 0)),
        "admitted_by_safety_net": int(by_net),
        "fans_admitted": int(admitted_fans),
        "claimed": int(counts.get("claimed", 0)),
        "admissions_never_claimed": int(counts.get("no_show", 0)),
        "sessions_ended": ended,
        "sessions_expired": int(counts.get("expired", 0)),
        "shadowed": int(counts.get("shadowed", 0)),
        "fans_held": int(held),
        "fans_paid": int(paid),
        "conversion": {
            "admitted_to_held": share(int(held), int(admitted_fans)),
            "held_to_paid": share(int(paid), int(held)),
            "admitted_to_paid": share(int(paid), int(admitted_fans)),
        },
    }
    return funnel, distribution(waits["admitted"])


def _refusals(conn: psycopg.Connection[Any], event: Event) -> Json:
    queue = {
        str(reason): int(n)
        for reason, n in _rows(
            conn, "SELECT reason, refused FROM queue_refusals WHERE event_id = %s ORDER BY reason", (event.event_id,)
        )
    }
    declined = {
        str(reason or "unspecified"): int(n)
        for reason, n in _rows(
            conn,
            """
            SELECT failure_reason, count(*) FROM payments
             WHERE event_id = %s AND state IN ('DECLINED', 'FAILED') GROUP BY 1 ORDER BY 1
            """,
            (event.event_id,),
        )
    }
    return {"queue_joins": queue, "payments": declined}


def _tickets(conn: psycopg.Connection[Any], event: Event) -> Json:
    sections = []
    for section_id, kind, capacity, sold, held, tickets, last_sale in _rows(
        conn,
        """
        SELECT s.section_id, s.kind, s.capacity + s.overbook_limit, s.sold, s.held,
               (SELECT count(*) FROM tickets t
                 WHERE t.event_id = s.event_id AND t.section_id = s.section_id AND t.voided_at IS NULL),
               (SELECT max(h.confirmed_at) FROM holds h
                 WHERE h.event_id = s.event_id AND h.section_id = s.section_id AND h.state = 'CONFIRMED')
          FROM section_totals s WHERE s.event_id = %s ORDER BY s.section_id
        """,
        (event.event_id,),
    ):
        sold_out = int(capacity) > 0 and int(sold) >= int(capacity) and last_sale is not None
        sections.append(
            {
                "section_id": str(section_id),
                "kind": str(kind),
                "capacity": int(capacity),
                "sold": int(sold),
                "held": int(held),
                "valid_tickets": int(tickets),
                "sold_out_after_seconds": (last_sale - event.opens_at).total_seconds() if sold_out else None,
            }
        )
    value = {
        str(currency): int(total)
        for currency, total in _rows(
            conn,
            """
            SELECT currency, sum(CASE WHEN state = 'CONFIRMED' THEN amount_minor
                                      ELSE amount_minor - coalesce(refund_amount_minor, 0) END)
              FROM holds WHERE event_id = %s AND confirmed_at IS NOT NULL
             GROUP BY 1 ORDER BY 1
            """,
            (event.event_id,),
        )
    }
    refunds = [
        {"source": str(source), "state": str(state), "currency": str(currency), "count": int(n), "amount_minor": int(a)}
        for source, state, currency, n, a in _rows(
            conn,
            """
            SELECT r.source, r.state, r.currency, count(*), sum(r.amount_minor)
              FROM refunds r JOIN payments p USING (payment_id)
             WHERE p.event_id = %s GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
            """,
            (event.event_id,),
        )
    ]
    cancelled = _one(conn, "SELECT count(*) FROM holds WHERE event_id = %s AND state = 'CANCELLED'", (event.event_id,))[
        0
    ]
    # Valid tickets the sandbox provider took the payment of (no money taken).
    sandbox = _one(
        conn,
        """
        SELECT count(*) FROM tickets t JOIN payments p ON p.payment_id::text = t.payment_id
         WHERE t.event_id = %s AND t.voided_at IS NULL AND p.provider = 'sandbox'
        """,
        (event.event_id,),
    )[0]
    # Bookings whose tickets' e-mail the relay refused, or that had no
    # verified address (the mailer's delivery records).
    undelivered = dict(
        _rows(
            conn,
            """
            SELECT state, count(*) FROM mail_deliveries
             WHERE event_id = %s AND kind = 'tickets' AND state IN ('FAILED', 'NO_ADDRESS') GROUP BY state
            """,
            (event.event_id,),
        )
    )
    return {
        "sections": sections,
        "tickets_not_delivered": {
            "refused": int(undelivered.get("FAILED", 0)),
            "no_address": int(undelivered.get("NO_ADDRESS", 0)),
        },
        "seats_sold": sum(s["sold"] for s in sections),
        "valid_tickets": sum(s["valid_tickets"] for s in sections),
        "sandbox_tickets": int(sandbox),
        "value_sold_minor": value,
        "bookings_cancelled": int(cancelled),
        "refunds": refunds,
    }


def _door(conn: psycopg.Connection[Any], event: Event) -> Json:
    """At the door: valid tickets (those sold and not voided), checked in,
    no-shows (valid, never checked in), tickets voided after their check-in,
    conflicts offline devices met, and the valid tickets checked in at each
    gate (their first check-in's), which add up to the checked in."""
    valid, entered, voided_inside = _one(
        conn,
        """
        SELECT count(*) FILTER (WHERE t.voided_at IS NULL),
               count(c.ticket_id) FILTER (WHERE t.voided_at IS NULL),
               count(c.ticket_id) FILTER (WHERE t.voided_at IS NOT NULL)
          FROM tickets t LEFT JOIN checkins c ON c.ticket_id = t.ticket_id
         WHERE t.event_id = %s
        """,
        (event.event_id,),
    )
    conflicts = _one(conn, "SELECT count(*) FROM checkin_conflicts WHERE event_id = %s", (event.event_id,))[0]
    gates = _rows(
        conn,
        """
        SELECT c.gate_id, count(*)
          FROM tickets t JOIN checkins c ON c.ticket_id = t.ticket_id
         WHERE t.event_id = %s AND t.voided_at IS NULL
         GROUP BY c.gate_id ORDER BY c.gate_id
        """,
        (event.event_id,),
    )
    return {
        "valid_tickets": int(valid),
        "checked_in": int(entered),
        "no_shows": int(valid) - int(entered),
        "checked_in_then_voided": int(voided_inside),
        "conflicts": int(conflicts),
        "checked_in_by_gate": [{"gate": str(gate), "checked_in": int(count)} for gate, count in gates],
    }


def _waitlist(conn: psycopg.Connection[Any], event: Event) -> Json:
    """The waiting list, as GetEventStats counts it: fans waiting now, offers
    open now, offers bought, offers that lapsed untaken or were declined."""
    waiting, offered, taken, lapsed = _one(
        conn,
        """
        SELECT count(*) FILTER (WHERE state = 'WAITING'),
               count(*) FILTER (WHERE state = 'OFFERED'),
               count(*) FILTER (WHERE state = 'TAKEN'),
               count(*) FILTER (WHERE state = 'LAPSED' OR (state = 'LEFT' AND offer_hold_id IS NOT NULL))
          FROM waitlist_entries WHERE event_id = %s
        """,
        (event.event_id,),
    )
    return {
        "waiting": int(waiting),
        "offers_open": int(offered),
        "offers_taken": int(taken),
        "offers_lapsed": int(lapsed),
    }


def gather(conn: psycopg.Connection[Any], event_id: int) -> Json:
    """Every figure of the report, read in the connection's transaction."""
    found = conn.execute(b"SELECT opens_at FROM queue_events WHERE event_id = %s", (event_id,)).fetchone()
    if found is None:
        raise UnknownEvent(event_id)
    event = Event(event_id, found[0])
    funnel, waits = _funnel(conn, event)
    return {
        "event_id": event_id,
        "funnel": funnel,
        "wait_seconds": waits,
        "refusals": _refusals(conn, event),
        "tickets": _tickets(conn, event),
        "door": _door(conn, event),
        "waitlist": _waitlist(conn, event),
        "reconciliation": reconciliation(conn, event.event_id),
    }


def read_report(database_url: str, event_id: int) -> Json:
    """The report of one event, in one read-only transaction."""
    with psycopg.connect(database_url, autocommit=False) as conn:
        conn.read_only = True
        conn.execute(b"SET LOCAL statement_timeout = %d" % STATEMENT_TIMEOUT_MS)
        try:
            return gather(conn, event_id)
        finally:
            conn.rollback()


# -- the formats ----------------------------------------------------------------


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(path, value) pairs of a JSON value: ``a.b[0].c``."""
    if isinstance(value, Mapping):
        pairs: list[tuple[str, str]] = []
        for key, item in value.items():
            pairs.extend(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return pairs
    if isinstance(value, list):
        pairs = []
        for index, item in enumerate(value):
            pairs.extend(flatten(item, f"{prefix}[{index}]"))
        return pairs
    if value is None:
        return [(prefix, "")]
    if isinstance(value, float):
        return [(prefix, f"{value:.6g}")]
    return [(prefix, str(value).lower() if isinstance(value, bool) else str(value))]


def to_csv(report: Json) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["figure", "value"])
    writer.writerows(flatten(report))
    return out.getvalue()


def to_json(report: Json) -> str:
    return json.dumps(report, indent=2, sort_keys=False) + "\n"


def render(report: Json, fmt: str) -> str:
    if fmt == "json":
        return to_json(report)
    if fmt == "csv":
        return to_csv(report)
    from boxoffice_cli.report_html import to_html

    return to_html(report)


def parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="boxoffice report", description="An event's on-sale report and reconciliation, from Postgres."
    )
    p.add_argument("event_id", type=positive, metavar="EVENT_ID")
    p.add_argument("--format", choices=("html", "json", "csv"), default="html")
    p.add_argument("--output", "-o", help="write to this file (default: standard output)")
    p.add_argument(
        "--database-url",
        default=environ.get("DATABASE_URL"),
        help="Postgres to read (default: DATABASE_URL); a read-only role is enough",
    )
    return p


def main(argv: Sequence[str], environ: Mapping[str, str], out: TextIO | None = None) -> int:
    """Run ``boxoffice report ARGV...``; the exit code."""
    p = parser(environ)
    try:
        args = p.parse_args(list(argv))
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else USAGE
    if not args.database_url:
        print("boxoffice report: error: set DATABASE_URL or give --database-url", file=sys.stderr)
        return USAGE
    try:
        report = read_report(args.database_url, args.event_id)
    except UnknownEvent:
        print(f"boxoffice report: error: event {args.event_id} has no waiting room", file=sys.stderr)
        return USAGE
    except psycopg.Error as err:
        first = (str(err).strip() or type(err).__name__).splitlines()[0]
        print(f"boxoffice report: cannot read Postgres: {first}", file=sys.stderr)
        return FAILED
    text = render(report, args.format)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(text)
    else:
        (out or sys.stdout).write(text)
    return OK
