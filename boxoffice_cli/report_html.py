"""The on-sale report as one self-contained HTML page: every chart an
inline SVG, the styles inline, no script, nothing fetched."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from boxoffice.money import format_money

Json = dict[str, Any]

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d2430;margin:0;background:#f5f6f8}
main{max-width:1040px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}
.sub{color:#5b6575;margin:0 0 18px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px}
.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:10px 12px}
.card b{display:block;font-size:20px}.card span{color:#5b6575;font-size:12px}
section{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:14px 16px;margin-top:14px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eceff3}
th{font-weight:600;color:#3b4452}td.n{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#17753a;font-weight:600}.bad{color:#b42318;font-weight:600}
svg text{font:11px system-ui,sans-serif;fill:#3b4452}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _money(amount_minor: int, currency: str) -> str:
    return format_money(amount_minor, currency, grouped=True)


# The reconciliation lines whose figures are money: minor units by currency.
_MONEY_LINES = frozenset({"captured_minus_refunded_equals_value_sold"})


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def bar_chart(
    labels: Sequence[str], values: Sequence[float], *, width: int = 960, height: int = 220, color: str = "#3566c8"
) -> str:
    """Vertical bars with a label under each (thinned when crowded)."""
    if not values:
        return '<p class="sub">No data.</p>'
    top = max(values) or 1.0
    left, bottom, pad = 48, 34, 8
    plot_w, plot_h = width - left - pad, height - bottom - pad
    step = plot_w / len(values)
    every = max(1, round(len(values) / 16))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for tick in range(5):
        y = pad + plot_h - plot_h * tick / 4
        parts.append(f'<line x1="{left}" x2="{width - pad}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e6eb"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(top * tick / 4, 0)}</text>')
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        h = plot_h * value / top
        x = left + i * step
        parts.append(
            f'<rect x="{x + step * 0.1:.1f}" y="{pad + plot_h - h:.1f}" width="{max(step * 0.8, 1):.1f}" '
            f'height="{h:.1f}" fill="{color}"><title>{_e(label)}: {_num(value, 0)}</title></rect>'
        )
        if i % every == 0:
            parts.append(
                f'<text x="{x + step / 2:.1f}" y="{height - bottom + 16}" text-anchor="middle">{_e(label)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def funnel_chart(steps: Sequence[tuple[str, int]], *, width: int = 960) -> str:
    """Horizontal bars, one per step, each with its count and its share of the first."""
    row, label_w = 28, 220
    height = row * len(steps) + 8
    first = steps[0][1] if steps and steps[0][1] else 1
    top = max((n for _, n in steps), default=1) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for i, (label, n) in enumerate(steps):
        y = 4 + i * row
        w = (width - label_w - 120) * n / top
        parts.append(f'<text x="{label_w - 8}" y="{y + 17}" text-anchor="end">{_e(label)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" fill="#3566c8" rx="3"/>')
        parts.append(f'<text x="{label_w + w + 6:.1f}" y="{y + 17}">{n:,} ({n / first:.0%})</text>')
    parts.append("</svg>")
    return "".join(parts)


def _cards(items: Sequence[tuple[str, str]]) -> str:
    return (
        '<div class="cards">'
        + "".join(f'<div class="card"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for k, v in items)
        + "</div>"
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[object]], numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=n' if i in numeric else ''}>{_e(c)}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pairs(values: Json) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in values.items())


def _money_pairs(values: Json) -> str:
    """Minor units by currency, each amount in its currency's decimals."""
    return ", ".join(_money(v, c) for c, v in values.items()) or "nothing"


def _item_cells(item: Json, keys: Sequence[str]) -> list[object]:
    """A listed item's cells: an amount in minor units (``..._minor``) beside
    its ``currency`` shown in that currency's decimals."""
    return [
        _money(item[k], item["currency"])
        if k.endswith("_minor") and "currency" in item and k in item
        else item.get(k, "")
        for k in keys
    ]


def _bucket(bucket: Json) -> str:
    low, high = bucket["from"], bucket["to"]
    return f"{low:g}+ s" if high is None else f"{low:g}-{high:g} s"


def to_html(report: Json) -> str:
    funnel, waits, tickets = report["funnel"], report["wait_seconds"], report["tickets"]
    refusals, recon = report["refusals"], report["reconciliation"]
    out: list[str] = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>On-sale report: event {_e(report['event_id'])}</title>",
        f"<style>{_STYLE}</style></head><body><main>",
        f"<h1>On-sale report: event {_e(report['event_id'])}</h1>",
        f'<p class="sub">Waiting room opened {_e(funnel["opens_at"])}. From the durable records '
        "(queue lifecycle, holds, payments, tickets).</p>",
    ]
    sold_out = [s["sold_out_after_seconds"] for s in tickets["sections"] if s["sold_out_after_seconds"] is not None]
    out.append(
        _cards(
            [
                ("fans joined", _num(funnel["fans_joined"])),
                ("in the pre-queue at opening", _num(funnel["pre_queue_at_opening"])),
                ("admitted", _num(funnel["admitted"])),
                ("median wait", f"{_num(waits['p50'])} s"),
                ("p90 / p99 wait", f"{_num(waits['p90'])} / {_num(waits['p99'])} s"),
                ("seats sold", _num(tickets["seats_sold"])),
                ("sold out after", f"{_num(max(sold_out))} s" if sold_out else "not sold out"),
                ("reconciliation", "balanced" if recon["ok"] else "MISMATCH"),
            ]
        )
    )
    steps = [
        ("joined", funnel["fans_joined"]),
        ("admitted", funnel["fans_admitted"]),
        ("claimed", funnel["claimed"]),
        ("held seats", funnel["fans_held"]),
        ("paid", funnel["fans_paid"]),
    ]
    conv = funnel["conversion"]
    out.append("<section><h2>Funnel</h2>" + funnel_chart(steps))
    out.append(
        _table(
            ["step", "count"],
            [
                ("left while waiting", _num(funnel["left_while_waiting"]["count"])),
                (
                    "dropped while waiting (not seen for the presence grace)",
                    _num(funnel["dropped_while_waiting"]["count"]),
                ),
                ("admissions never claimed", _num(funnel["admissions_never_claimed"])),
                ("admitted at once by the safety net", _num(funnel["admitted_by_safety_net"])),
                ("sessions expired", _num(funnel["sessions_expired"])),
                *((f"sessions ended: {k}", _num(v)) for k, v in funnel["sessions_ended"].items()),
                ("shadowed (flagged)", _num(funnel["shadowed"])),
                ("admitted → held", _share(conv["admitted_to_held"])),
                ("held → paid", _share(conv["held_to_paid"])),
                ("admitted → paid", _share(conv["admitted_to_paid"])),
            ],
            numeric=(1,),
        )
        + "</section>"
    )
    arrivals = funnel["arrivals_per_minute"]
    out.append(
        "<section><h2>Arrivals per minute (minute 0 = opening)</h2>"
        + bar_chart([str(a["minute"]) for a in arrivals], [a["joined"] for a in arrivals])
        + "</section>"
    )
    out.append(
        "<section><h2>Time in queue until admitted</h2>"
        + bar_chart([_bucket(b) for b in waits["histogram"]], [b["count"] for b in waits["histogram"]], color="#7a4fc2")
        + _table(
            ["", "admitted", "left", "dropped"],
            [
                (
                    label,
                    _num(waits[key]),
                    _num(funnel["left_while_waiting"]["waited_seconds"][key]),
                    _num(funnel["dropped_while_waiting"]["waited_seconds"][key]),
                )
                for label, key in (("fans", "count"), ("p50 (s)", "p50"), ("p90 (s)", "p90"), ("p99 (s)", "p99"))
            ],
            numeric=(1, 2, 3),
        )
        + "</section>"
    )
    out.append(
        "<section><h2>Sections</h2>"
        + _table(
            ["section", "kind", "capacity", "sold", "held now", "valid tickets", "sold out after"],
            [
                (
                    s["section_id"],
                    s["kind"],
                    _num(s["capacity"]),
                    _num(s["sold"]),
                    _num(s["held"]),
                    _num(s["valid_tickets"]),
                    "-" if s["sold_out_after_seconds"] is None else f"{s['sold_out_after_seconds']:,.1f} s",
                )
                for s in tickets["sections"]
            ],
            numeric=(2, 3, 4, 5, 6),
        )
        + _table(
            ["value sold", "amount"],
            [(c, _money(v, c)) for c, v in tickets["value_sold_minor"].items()],
            numeric=(1,),
        )
        + (
            f"<p><strong>{_num(tickets['sandbox_tickets'])} valid tickets were paid in the sandbox</strong>"
            " (no money taken).</p>"
            if tickets.get("sandbox_tickets")
            else ""
        )
        + _not_delivered(tickets.get("tickets_not_delivered") or {})
        + "</section>"
    )
    refusal_rows = [(f"join refused: {k}", _num(v)) for k, v in refusals["queue_joins"].items()]
    refusal_rows += [(f"payment declined or failed: {k}", _num(v)) for k, v in refusals["payments"].items()]
    refund_rows = [
        (r["source"], r["state"], r["currency"], _num(r["count"]), _money(r["amount_minor"], r["currency"]))
        for r in tickets["refunds"]
    ]
    out.append(
        "<section><h2>Refusals and refunds</h2>"
        + (_table(["refusal", "count"], refusal_rows, numeric=(1,)) if refusal_rows else '<p class="sub">None.</p>')
        + (
            _table(["refund source", "state", "currency", "refunds", "amount"], refund_rows, numeric=(3, 4))
            if refund_rows
            else '<p class="sub">No refunds.</p>'
        )
        + f'<p class="sub">Bookings cancelled: {_num(tickets["bookings_cancelled"])}.</p></section>'
    )
    door = report["door"]
    door_rows = [(k.replace("_", " "), _num(v)) for k, v in door.items() if k != "checked_in_by_gate"]
    gate_rows = [(g["gate"], _num(g["checked_in"])) for g in door["checked_in_by_gate"]]
    out.append(
        "<section><h2>At the door</h2>"
        + _table(["tickets", "count"], door_rows, numeric=(1,))
        + (
            _table(["gate", "checked in"], gate_rows, numeric=(1,))
            if gate_rows
            else '<p class="sub">Nobody checked in yet.</p>'
        )
        + "</section>"
    )
    waitlist = report.get("waitlist") or {}
    waitlist_rows = [
        (label, _num(int(waitlist.get(key, 0))))
        for label, key in (
            ("waiting", "waiting"),
            ("offers open", "offers_open"),
            ("offers taken", "offers_taken"),
            ("offers lapsed or declined", "offers_lapsed"),
        )
    ]
    out.append("<section><h2>Waiting list</h2>" + _table(["fans", "count"], waitlist_rows, numeric=(1,)) + "</section>")
    out.append("<section><h2>Reconciliation</h2>")
    for line in recon["lines"]:
        verdict = (
            '<span class="ok">zero</span>' if line["ok"] else f'<span class="bad">{line["mismatches"]:,} off</span>'
        )
        pairs = _money_pairs if line["line"] in _MONEY_LINES else _pairs
        out.append(
            f"<h3>{_e(line['line'].replace('_', ' '))}: {verdict}</h3>"
            f'<p class="sub">expected {_e(pairs(line["expected"]))}; found {_e(pairs(line["actual"]))}</p>'
        )
        if line["items"]:
            keys = list(dict.fromkeys(k for item in line["items"] for k in item))
            header = [k.removesuffix("_minor") for k in keys]
            out.append(_table(header, [_item_cells(item, keys) for item in line["items"]]))
    out.append("</section></main></body></html>\n")
    return "".join(out)


def _not_delivered(counts: dict[str, int]) -> str:
    """The bookings whose tickets' e-mail did not go out."""
    refused, no_address = int(counts.get("refused", 0)), int(counts.get("no_address", 0))
    return (
        f'<p class="sub">Tickets not delivered: {_num(refused)} refused by the relay'
        f" (see the mailer's records), {_num(no_address)} without"
        " a verified address.</p>"
    )
