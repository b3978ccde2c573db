"""The door's rules against a real Postgres: a ticket admits once however
many gates scan it at one instant, a void ticket never admits, and a code
with a bad signature is refused without a database query (I15)."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from boxoffice import db, ticketcodes
from boxoffice.errors import InvalidArgument
from boxoffice.ticketcodes import TicketClaims, TicketCodeSigner
from checkin_svc.model import Scan, ScanResult
from tests.checkin.harness import Door, new_event
from tests.support import ManualClock


async def test_fifty_scans_from_five_devices_admit_once(door: Door) -> None:
    event = new_event()
    ticket_id, code = await door.ticket(event, seat="row K, seat 6")
    scans = [door.scan(event, code, gate=f"gate-{i % 5}", device=f"device-{i % 5}") for i in range(50)]
    outcomes = await asyncio.gather(*(door.handler.scan(scan) for scan in scans))
    assert Counter(o.result for o in outcomes) == {ScanResult.ADMITTED: 1, ScanResult.ALREADY_CHECKED_IN: 49}
    (first,) = [o.first_checkin for o in outcomes if o.result is ScanResult.ADMITTED]
    assert first is not None
    # Every refused scan names the one admission: when and at which gate.
    assert {o.first_checkin for o in outcomes} == {first}
    assert all(o.ticket is not None and o.ticket.seat_label == "row K, seat 6" for o in outcomes)
    counted = {
        (s.labels["gate"], s.labels["result"]): s.value
        for m in door.metrics.scans.collect()
        for s in m.samples
        if s.name.endswith("_total") and s.labels["event_id"] == str(event)
    }
    assert sum(counted.values()) == 50 and len(counted) == 6  # five gates, one of them admitted
    assert sum(v for (_, result), v in counted.items() if result == "admitted") == 1
    async with db.transaction(door.pool) as conn:
        cur = await conn.execute("SELECT count(*), min(gate_id) FROM checkins WHERE ticket_id = %s", (ticket_id,))
        assert await cur.fetchone() == (1, first.gate_id)
    # Later scans say the same.
    again = await door.handler.scan(door.scan(event, code, gate="south-2"))
    assert (again.result, again.first_checkin) == (ScanResult.ALREADY_CHECKED_IN, first)


async def test_a_void_ticket_never_admits(door: Door) -> None:
    event = new_event()
    ticket_id, code = await door.ticket(event)
    async with db.transaction(door.pool) as conn:
        await conn.execute("UPDATE tickets SET voided_at = now() WHERE ticket_id = %s", (ticket_id,))
    outcome = await door.handler.scan(door.scan(event, code))
    assert outcome.result is ScanResult.VOID and outcome.first_checkin is None
    async with db.transaction(door.pool) as conn:
        cur = await conn.execute("SELECT count(*) FROM checkins WHERE ticket_id = %s", (ticket_id,))
        assert await cur.fetchone() == (0,)


async def test_another_events_ticket_is_wrong_event(door: Door) -> None:
    event, other = new_event(), new_event()
    _, code = await door.ticket(other)
    assert (await door.handler.scan(door.scan(event, code))).result is ScanResult.WRONG_EVENT
    # The same for a code of before signed codes, which is looked up.
    legacy = "TKT-" + secrets.token_hex(8).upper()
    await door.ticket(other, code=legacy)
    assert (await door.handler.scan(door.scan(event, legacy))).result is ScanResult.WRONG_EVENT
    assert (await door.handler.scan(door.scan(other, legacy))).result is ScanResult.ADMITTED
    assert (await door.handler.scan(door.scan(other, legacy))).result is ScanResult.ALREADY_CHECKED_IN


async def test_a_code_nobody_holds_is_unknown(door: Door) -> None:
    event = new_event()
    signed = door.signer.sign(TicketClaims(str(uuid.uuid4()), event, "A", "", door.signer.now()))
    assert (await door.handler.scan(door.scan(event, signed))).result is ScanResult.UNKNOWN
    legacy = "TKT-" + secrets.token_hex(8).upper()
    assert (await door.handler.scan(door.scan(event, legacy))).result is ScanResult.UNKNOWN


async def test_a_bad_code_is_invalid_before_any_database_query(door: Door) -> None:
    event = new_event()
    _, code = await door.ticket(event)
    other_keys = ticketcodes.parse_keys("c1:" + "0d" * 32)
    forged = TicketCodeSigner(lambda: other_keys, ManualClock()).sign(
        TicketClaims(str(uuid.uuid4()), event, "A", "", door.signer.now())
    )
    changed = [code[:i] + ("A" if code[i] != "A" else "B") + code[i + 1 :] for i in range(0, len(code), 9)]
    bad = [c for c in changed if c != code] + [forged, "", "hello", "TKT-short", "x" * 5000]
    before = door.pool.get_stats()["requests_num"]
    outcomes = [await door.handler.scan(door.scan(event, c)) for c in bad]
    assert door.pool.get_stats()["requests_num"] == before
    assert {o.result for o in outcomes} == {ScanResult.INVALID}
    # The control: a good code does ask the database.
    assert (await door.handler.scan(door.scan(event, code))).result is ScanResult.ADMITTED
    assert door.pool.get_stats()["requests_num"] > before


async def test_scanned_at_is_the_first_checkins_time(door: Door) -> None:
    event = new_event()
    _, code = await door.ticket(event)
    when = datetime.now(UTC) - timedelta(minutes=3)
    outcome = await door.handler.scan(Scan(event, code, "west-1", "d9", when))
    assert outcome.first_checkin is not None
    assert (outcome.first_checkin.gate_id, outcome.first_checkin.device_id) == ("west-1", "d9")
    assert outcome.first_checkin.checked_in_at == when


async def test_a_scan_without_a_gate_or_device_is_refused_and_changes_nothing(door: Door) -> None:
    event = new_event()
    _, code = await door.ticket(event)
    for gate, device, field in (("", "d1", "gate_id"), ("north 1", "d1", "gate_id"), ("north-1", "", "device_id")):
        with pytest.raises(InvalidArgument) as refused:
            await door.handler.scan(door.scan(event, code, gate=gate, device=device))
        assert refused.value.metadata == {"field": field}
    with pytest.raises(InvalidArgument) as refused:
        await door.handler.upload([door.scan(event, code), door.scan(event, code, device="")])
    assert refused.value.reason == "FIELD_REQUIRED"
    # Nothing was checked in: the ticket still admits, once.
    assert (await door.handler.scan(door.scan(event, code))).result is ScanResult.ADMITTED
