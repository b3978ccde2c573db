"""``boxoffice report`` after a scripted small on-sale on the real mesh
(the synthetic crowd through the edge's HTTP API, real Postgres, Redis and
gRPC): every figure equals the count taken directly from Postgres and
Redis, the reconciliation balances, and a planted mismatch is listed item
by item."""

from __future__ import annotations

import asyncio
import copy
import csv
import dataclasses
import io
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import redis.asyncio as aioredis

from boxoffice_cli import report as report_cli
from boxoffice_cli.simulate import settled_report, summary_lines
from boxoffice_cli.simulate_crowd import Crowd, Tally, create_event, open_room, pause_room
from boxoffice_cli.simulate_scenario import Scenario
from queue_svc.adapters import EventKeys
from tests.edge.harness import EdgeStack, edge_stack
from tests.support import Stores

# Small enough for the suite: 48 fans for 16 seats, a few bots and declined cards.
SCENARIO = Scenario(
    fans=48,
    seats=16,
    row_seats=8,
    admission_rate=8,
    max_active=6,
    opens_in_seconds=3.0,
    pre_queue_share=0.4,
    surge_seconds=3.0,
    show_rate=0.8,
    declined_share=0.2,
    bot_share=0.1,
    bot_joins=25,
    think_seconds=(0.05, 0.2),
    pay_seconds=(0.05, 0.2),
    claim_grace_seconds=5,
    session_seconds=120,
    seed=7,
)


@dataclasses.dataclass
class OnSale:
    event_id: int
    tally: Tally
    report: dict[str, Any]
    redis: dict[str, Any]


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="report") as stack:
        yield stack


@pytest.fixture(scope="module")
async def on_sale(stack: EdgeStack, stores: Stores) -> OnSale:
    import time

    event_id = 10**9 + uuid.uuid4().int % 10**11
    started = time.time() + 1.0
    # The room opens when the crowd's early fans have all joined (open_room),
    # not at a time: on a loaded machine they could still be signing in at
    # any fixed opening. Its opens_at is only a bound, well after them.
    await create_event(
        stack.operators["queue"],
        stack.operators["booking"],
        SCENARIO,
        event_id,
        started + SCENARIO.opens_in_seconds + 30,
    )
    crowd = Crowd(
        stack.url,
        event_id,
        SCENARIO,
        started_at=started,
        run_id=uuid.uuid4().hex[:8],
        on_sold_out=lambda: pause_room(stack.operators["queue"], event_id),
        open_room=lambda: open_room(stack.operators["queue"], event_id),
    )
    tally = await crowd.run()
    assert tally.errors == 0, tally.error_samples
    keys = EventKeys.of(event_id)
    client = aioredis.Redis.from_url(stores.redis_url)
    try:
        # The no-shows' admissions lapse (claim grace 5 s) at a later tick; wait
        # until nobody is admitted-unclaimed any more and the log is copied.
        for _ in range(400):
            if not await client.zcard(keys.admitted) and not await client.llen(keys.lifecycle):
                break
            await asyncio.sleep(0.05)
        report = await settled_report(stores.database_url, event_id)
        progress = {_text(k): _text(v) for k, v in (await client.hgetall(keys.progress)).items()}
        refused = {_text(k): int(v) for k, v in (await client.hgetall(keys.refusals)).items()}
        trimmed = int(await client.get(keys.lifecycle_trimmed) or 0)
        left = await client.llen(keys.lifecycle)
    finally:
        await client.aclose()
    return OnSale(event_id, tally, report, {"progress": progress, "refused": refused, "trimmed": trimmed, "left": left})


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _pg(stores: Stores, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(stores.database_url) as conn:
        return list(conn.execute(sql.encode(), params).fetchall())


def _scalar(stores: Stores, sql: str, *params: object) -> Any:
    return _pg(stores, sql, *params)[0][0]


async def test_every_funnel_figure_equals_the_direct_counts(on_sale: OnSale, stores: Stores) -> None:
    r, e = on_sale.report, on_sale.event_id
    funnel, redis_progress = r["funnel"], on_sale.redis["progress"]
    assert set(r) == {"event_id", "funnel", "wait_seconds", "refusals", "tickets", "door", "waitlist", "reconciliation"}
    # Nobody has come to the door yet: every valid ticket is a no-show so far.
    valid = _scalar(stores, "SELECT count(*) FROM tickets WHERE event_id = %s AND voided_at IS NULL", e)
    assert r["door"] == {
        "valid_tickets": valid,
        "checked_in": 0,
        "no_shows": valid,
        "checked_in_then_voided": 0,
        "conflicts": 0,
        "checked_in_by_gate": [],
    }
    # Every entry Redis logged was copied (none left, the trimmed count is the rows').
    assert on_sale.redis["left"] == 0
    assert _scalar(stores, "SELECT count(*) FROM queue_lifecycle WHERE event_id = %s", e) == on_sale.redis["trimmed"]
    # Redis's own counters of the room.
    assert funnel["pre_queue_at_opening"] == int(redis_progress.get("pre", 0)) > 0
    assert funnel["joins"] == int(redis_progress["joined"])  # the pre-queue's included
    assert funnel["admitted"] == int(redis_progress["admitted"]) > 0
    assert funnel["claimed"] == int(redis_progress.get("claimed", 0)) == on_sale.tally.admitted
    assert funnel["admissions_never_claimed"] == int(redis_progress.get("noshow", 0)) > 0
    assert funnel["fans_joined"] == len(
        {
            f
            for (f,) in _pg(
                stores, "SELECT customer_id FROM queue_lifecycle WHERE event_id = %s AND kind = 'joined'", e
            )
        }
    )
    # Refusals: the join limits the bots ran into, as Redis counted them.
    assert r["refusals"]["queue_joins"] == on_sale.redis["refused"]
    assert on_sale.redis["refused"].get("account_limit", 0) == on_sale.tally.joins_refused > 0
    # Booking and payment, counted directly.
    held = _scalar(stores, "SELECT count(DISTINCT customer_id) FROM holds WHERE event_id = %s", e)
    paid = _scalar(
        stores, "SELECT count(DISTINCT customer_id) FROM holds WHERE event_id = %s AND state = 'CONFIRMED'", e
    )
    assert (funnel["fans_held"], funnel["fans_paid"]) == (held, paid) == (on_sale.tally.held, on_sale.tally.paid)
    declined = dict(
        _pg(
            stores,
            "SELECT failure_reason, count(*) FROM payments WHERE event_id = %s AND state = 'DECLINED' GROUP BY 1",
            e,
        )
    )
    assert r["refusals"]["payments"] == declined and sum(declined.values()) == on_sale.tally.declined


async def test_waits_and_tickets_equal_the_direct_counts(on_sale: OnSale, stores: Stores) -> None:
    r, e = on_sale.report, on_sale.event_id
    opens = _scalar(stores, "SELECT opens_at FROM queue_events WHERE event_id = %s", e)
    # Each admission's wait, paired here in Python with the fan's join before it.
    rows = _pg(stores, "SELECT idx, kind, customer_id, at FROM queue_lifecycle WHERE event_id = %s ORDER BY idx", e)
    last_join: dict[str, Any] = {}
    waits = []
    for _, kind, customer, at in rows:
        if kind == "joined":
            last_join[customer] = at
        elif kind == "admitted":
            waits.append(max(0.0, (at - max(last_join[customer], opens)).total_seconds()))
    waits.sort()
    assert r["wait_seconds"]["count"] == len(waits) == r["funnel"]["admitted"]
    assert r["wait_seconds"]["p50"] == pytest.approx(report_cli.percentile(waits, 0.5))
    assert r["wait_seconds"]["p99"] == pytest.approx(
        waits[-1] if len(waits) < 100 else report_cli.percentile(waits, 0.99)
    )
    assert sum(b["count"] for b in r["wait_seconds"]["histogram"]) == len(waits)
    # Seats and tickets.
    tickets = r["tickets"]
    sold = _scalar(stores, "SELECT sum(sold) FROM section_totals WHERE event_id = %s", e)
    valid = _scalar(stores, "SELECT count(*) FROM tickets WHERE event_id = %s AND voided_at IS NULL", e)
    assert tickets["seats_sold"] == sold == valid == tickets["valid_tickets"] == on_sale.tally.tickets == SCENARIO.seats
    assert tickets["sandbox_tickets"] == valid  # the scenario pays in the sandbox, and the report says so
    (section,) = tickets["sections"]
    last_sale = _scalar(stores, "SELECT max(confirmed_at) FROM holds WHERE event_id = %s AND state = 'CONFIRMED'", e)
    assert section["sold_out_after_seconds"] == pytest.approx((last_sale - opens).total_seconds())
    value = _scalar(stores, "SELECT sum(amount_minor) FROM holds WHERE event_id = %s AND state = 'CONFIRMED'", e)
    assert tickets["value_sold_minor"] == {"EUR": value} and value == SCENARIO.seats * SCENARIO.price_minor
    # Arrivals per minute add up to the joins.
    assert sum(a["joined"] for a in r["funnel"]["arrivals_per_minute"]) == r["funnel"]["joins"]


async def test_the_reconciliation_balances_and_lists_a_planted_mismatch(on_sale: OnSale, stores: Stores) -> None:
    recon = on_sale.report["reconciliation"]
    assert recon["ok"] and [line["mismatches"] for line in recon["lines"]] == [0, 0, 0, 0]
    # Every payment settled: none pending with us (a pending one is listed:
    # tests/e2e/test_payment_in_flight.py).
    assert recon["lines"][3]["line"] == "no_payment_pending_with_us" and recon["lines"][3]["items"] == []
    e = on_sale.event_id
    with psycopg.connect(stores.database_url) as conn:
        # Planted in a transaction that is rolled back: a payment that
        # refunded 1.00 too much, and a ticket nobody paid for.
        payment_id, hold_id = conn.execute(
            b"SELECT payment_id, hold_id FROM payments WHERE event_id = %s AND state = 'SUCCEEDED' LIMIT 1", (e,)
        ).fetchone() or (None, None)
        conn.execute(b"UPDATE payments SET refunded_minor = 100 WHERE payment_id = %s", (payment_id,))
        ticket_id = uuid.uuid4()
        conn.execute(
            b"""
            INSERT INTO tickets (ticket_id, event_id, hold_id, unit, customer_id, section_id, seat_id, seat_label,
                                 payment_id, source_event_id, code)
            VALUES (%s, %s, %s, 99, 'planted', 'A', NULL, '', 'no-such-payment', %s, %s)
            """,
            (ticket_id, e, uuid.uuid4(), uuid.uuid4(), uuid.uuid4().hex),
        )
        planted = report_cli.gather(conn, e)["reconciliation"]
        conn.rollback()
    money, seats, tickets, _ = planted["lines"]
    assert not planted["ok"]
    assert money["items"] == [
        {
            "hold_id": str(hold_id),
            "currency": "EUR",
            "value_sold_minor": money["items"][0]["value_sold_minor"],
            "captured_minor": money["items"][0]["value_sold_minor"],
            "refunded_minor": 100,
            "difference_minor": -100,
        }
    ]
    assert seats["items"] == [{"section_id": "A", "seats_sold": SCENARIO.seats, "valid_tickets": SCENARIO.seats + 1}]
    assert [(i["ticket_id"], i["problem"]) for i in tickets["items"]] == [
        (str(ticket_id), "no such payment of its hold")
    ]


async def test_the_html_shows_each_amount_in_its_currencys_decimals(on_sale: OnSale) -> None:
    from boxoffice_cli.report_html import to_html

    report = copy.deepcopy(on_sale.report)
    report["tickets"]["value_sold_minor"] = {"EUR": 4_500_000, "JPY": 5000}
    report["tickets"]["refunds"] = [
        {"source": "customer", "state": "SUCCEEDED", "currency": "JPY", "count": 2, "amount_minor": 1500},
        {"source": "customer", "state": "SUCCEEDED", "currency": "EUR", "count": 1, "amount_minor": 650},
    ]
    money = report["reconciliation"]["lines"][0]
    assert money["line"] == "captured_minus_refunded_equals_value_sold"
    money |= {
        "expected": {"EUR": 4_500_000},
        "actual": {"EUR": 4_499_900},
        "mismatches": 1,
        "ok": False,
        "items": [
            {
                "hold_id": "h-1",
                "currency": "EUR",
                "value_sold_minor": 13800,
                "captured_minor": 13800,
                "refunded_minor": 100,
                "difference_minor": -100,
            }
        ],
    }
    page = to_html(report)
    for amount in ("45,000.00 EUR", "5,000 JPY", "1,500 JPY", "6.50 EUR"):
        assert f"<td class=n>{amount}</td>" in page, amount
    assert "expected 45,000.00 EUR; found 44,999.00 EUR" in page
    for cell in ("h-1", "EUR", "138.00 EUR", "138.00 EUR", "1.00 EUR", "-1.00 EUR"):
        assert f"<td>{cell}</td>" in page, cell
    # Never minor units, never the currency before a bare number.
    assert "4,500,000" not in page and ">13800<" not in page and ">-100<" not in page
    assert "50.00" not in page and "15.00" not in page


async def test_the_command_writes_json_csv_and_a_self_contained_html(
    on_sale: OnSale, stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"DATABASE_URL": stores.database_url}
    out = io.StringIO()
    assert report_cli.main([str(on_sale.event_id), "--format", "json"], env, out) == 0
    as_json = json.loads(out.getvalue())
    assert list(as_json) == [
        "event_id",
        "funnel",
        "wait_seconds",
        "refusals",
        "tickets",
        "door",
        "waitlist",
        "reconciliation",
    ]
    assert as_json["funnel"]["admitted"] == on_sale.report["funnel"]["admitted"]
    out = io.StringIO()
    assert report_cli.main([str(on_sale.event_id), "--format", "csv"], env, out) == 0
    rows = dict(csv.reader(io.StringIO(out.getvalue())))
    assert rows["funnel.admitted"] == str(on_sale.report["funnel"]["admitted"])
    assert rows["reconciliation.ok"] == "true"
    out = io.StringIO()
    assert report_cli.main([str(on_sale.event_id)], env, out) == 0
    page = out.getvalue()
    assert page.startswith("<!doctype html>") and page.count("<svg") >= 3
    for outside in ("<script", "src=", "href=", "@import", "url("):
        assert outside not in page
    # Bad input: a clear error, exit 2, nothing written.
    for argv, message in (
        (["0"], "must be positive"),
        (["x"], "not a number"),
        ([str(10**15 + 7)], "has no waiting room"),
        ([str(on_sale.event_id), "--format", "pdf"], "invalid choice"),
    ):
        out = io.StringIO()
        assert report_cli.main(argv, env, out) == 2
        assert out.getvalue() == "" and message in capsys.readouterr().err
    assert report_cli.main([str(on_sale.event_id)], {}, io.StringIO()) == 2
    # The simulator's closing lines carry the same figures.
    text = "\n".join(summary_lines(on_sale.report))
    funnel = on_sale.report["funnel"]
    assert f"{funnel['fans_admitted']:,} admitted, {funnel['claimed']:,} claimed" in text
    assert "reconciliation balanced" in text


async def test_tickets_not_delivered_are_counted_from_the_mailers_records(on_sale: OnSale, stores: Stores) -> None:
    # Nobody's mailer ran in the scenario: nothing is recorded undelivered.
    assert on_sale.report["tickets"]["tickets_not_delivered"] == {"refused": 0, "no_address": 0}
    e = on_sale.event_id
    with psycopg.connect(stores.database_url) as conn:
        # Planted in a transaction that is rolled back: two refused, one
        # without an address, one sent, and a refused one of another event.
        for state, event_id in (("FAILED", e), ("FAILED", e), ("NO_ADDRESS", e), ("SENT", e), ("FAILED", e + 1)):
            conn.execute(
                b"""
                INSERT INTO mail_deliveries (hold_id, kind, event_id, message_id, state)
                VALUES (%s, 'tickets', %s, %s, %s)
                """,
                (uuid.uuid4(), event_id, f"<{uuid.uuid4()}@test>", state),
            )
        planted = report_cli.gather(conn, e)["tickets"]["tickets_not_delivered"]
        conn.rollback()
    assert planted == {"refused": 2, "no_address": 1}


async def test_the_waiting_list_is_counted_from_its_entries(on_sale: OnSale, stores: Stores) -> None:
    # Nobody joined the scenario's waiting list.
    empty = {"waiting": 0, "offers_open": 0, "offers_taken": 0, "offers_lapsed": 0}
    assert on_sale.report["waitlist"] == empty
    e = on_sale.event_id
    with psycopg.connect(stores.database_url) as conn:
        # Planted in a transaction that is rolled back: three waiting, an
        # offer open, two bought, one lapsed and one declined (left with its
        # offer), one who left while waiting, and another event's entry.
        other = e + 1
        conn.execute(
            b"""
            INSERT INTO events (event_id, display_name, kind, starts_at, hold_ttl_seconds, max_seats_per_customer,
                                time_zone, venue_name, venue_city)
            VALUES (%s, 'Another', 'CONCERT', now() + interval '30 days', 300, 4, 'UTC', 'Hall', 'Town')
            ON CONFLICT (event_id) DO NOTHING
            """,
            (other,),
        )
        planted = [
            *[("WAITING", False, e)] * 3,
            ("OFFERED", True, e),
            *[("TAKEN", True, e)] * 2,
            ("LAPSED", True, e),
            ("LEFT", True, e),
            ("LEFT", False, e),
            ("WAITING", False, other),
        ]
        for n, (state, offered, event_id) in enumerate(planted):
            conn.execute(
                b"""
                INSERT INTO waitlist_entries (event_id, customer_id, section_id, quantity, state, joined_at,
                                              offer_hold_id, offered_at)
                VALUES (%s, %s, 'A', 1, %s, now(), %s, CASE WHEN %s THEN now() END)
                """,
                (event_id, f"report-wl-{n}-{uuid.uuid4().hex[:8]}", state, uuid.uuid4() if offered else None, offered),
            )
        report = report_cli.gather(conn, e)
        conn.rollback()
    assert report["waitlist"] == {"waiting": 3, "offers_open": 1, "offers_taken": 2, "offers_lapsed": 2}
    page = report_cli.render(report, "html")
    assert "<h2>Waiting list</h2>" in page
    for label, count in (("waiting", 3), ("offers open", 1), ("offers taken", 2), ("offers lapsed or declined", 2)):
        assert f"<td>{label}</td><td class=n>{count}</td>" in page
    rows = dict(csv.reader(io.StringIO(report_cli.render(report, "csv"))))
    assert rows["waitlist.offers_lapsed"] == "2"


async def test_the_html_shows_the_door_per_gate(on_sale: OnSale) -> None:
    from boxoffice_cli.report_html import to_html

    # Nobody has come to the door of the simulated on-sale.
    assert '<p class="sub">Nobody checked in yet.</p>' in to_html(on_sale.report)
    report = copy.deepcopy(on_sale.report)
    report["door"] |= {
        "checked_in": 1250,
        "checked_in_by_gate": [{"gate": "north-1", "checked_in": 1200}, {"gate": "south-1", "checked_in": 50}],
    }
    page = to_html(report)
    assert "<th>gate</th><th>checked in</th>" in page
    assert "<tr><td>north-1</td><td class=n>1,200</td></tr><tr><td>south-1</td><td class=n>50</td></tr>" in page
    assert "<td>checked in</td><td class=n>1,250</td>" in page and "checked in by gate" not in page
    assert "Nobody checked in yet." not in page
