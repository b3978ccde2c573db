"""Re-entry: an exit scan lets the holder out; at an event with re-entry the
next entry scan admits again (once, however many gates scan at that
instant); without it, a ticket admits once whatever the exits."""

from __future__ import annotations

import asyncio
from collections import Counter

from checkin_svc.model import Direction, ScanResult
from tests.checkin.harness import Door, new_event


async def test_scan_out_and_in_at_an_event_with_re_entry(door: Door) -> None:
    event = new_event()
    door.reentry.events = {event}
    _, code = await door.ticket(event)
    assert (await door.handler.scan(door.scan(event, code, direction=Direction.OUT))).result is ScanResult.NOT_INSIDE
    first = await door.handler.scan(door.scan(event, code))
    assert first.result is ScanResult.ADMITTED
    # Inside: another entry is refused, naming the first check-in.
    inside = await door.handler.scan(door.scan(event, code, gate="south-1"))
    assert (inside.result, inside.first_checkin) == (ScanResult.ALREADY_CHECKED_IN, first.first_checkin)
    left = await door.handler.scan(door.scan(event, code, direction=Direction.OUT))
    assert left.result is ScanResult.LEFT
    assert (await door.handler.scan(door.scan(event, code, direction=Direction.OUT))).result is ScanResult.NOT_INSIDE
    # Back in: ten gates at once admit once.
    outcomes = await asyncio.gather(*(door.handler.scan(door.scan(event, code, gate=f"g{i}")) for i in range(10)))
    assert Counter(o.result for o in outcomes) == {ScanResult.ADMITTED: 1, ScanResult.ALREADY_CHECKED_IN: 9}
    assert {o.first_checkin for o in outcomes} == {first.first_checkin}


async def test_without_re_entry_a_ticket_that_left_does_not_come_back(door: Door) -> None:
    event = new_event()
    _, code = await door.ticket(event)
    assert (await door.handler.scan(door.scan(event, code))).result is ScanResult.ADMITTED
    assert (await door.handler.scan(door.scan(event, code, direction=Direction.OUT))).result is ScanResult.LEFT
    assert (await door.handler.scan(door.scan(event, code))).result is ScanResult.ALREADY_CHECKED_IN


async def test_an_exit_scan_of_another_events_ticket_is_wrong_event(door: Door) -> None:
    event = new_event()
    _, other = await door.ticket(new_event())
    assert (await door.handler.scan(door.scan(event, other, direction=Direction.OUT))).result is ScanResult.WRONG_EVENT
