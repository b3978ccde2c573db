"""Rotating codes at the door: the current and the previous 30 s step admit,
one two steps old is EXPIRED_CODE before any database read, a wrong mac is
INVALID, and a static code admits only at an event that accepts them
(elsewhere it is EXPIRED_CODE, as the contract says)."""

from __future__ import annotations

import uuid

from boxoffice import ticketcodes
from checkin_svc.model import ScanResult
from tests.checkin.harness import Door, new_event


async def test_a_rotating_code_admits_for_two_steps_then_expires(door: Door) -> None:
    event = new_event()
    door.static.events = set()  # this event takes rotating codes only
    ticket_id, code = await door.ticket(event)
    secret = await door.handler.ticket_secret(ticket_id)
    assert await door.handler.ticket_secret(ticket_id) == secret  # one secret per ticket
    step = ticketcodes.rotation_step(door.clock.now())
    # A screenshot taken two steps ago: expired, and no connection asked for it.
    old = ticketcodes.rotating_code(code, secret, ticket_id, step - 2)
    before = door.pool.get_stats()["requests_num"]
    assert (await door.handler.scan(door.scan(event, old))).result is ScanResult.EXPIRED_CODE
    assert door.pool.get_stats()["requests_num"] == before
    # The static code alone is refused at this event.
    assert (await door.handler.scan(door.scan(event, code))).result is ScanResult.EXPIRED_CODE
    # Another secret's mac, or another ticket's: invalid.
    forged = ticketcodes.rotating_code(code, b"\x00" * 32, ticket_id, step)
    assert (await door.handler.scan(door.scan(event, forged))).result is ScanResult.INVALID
    other_id, _ = await door.ticket(event)
    other_secret = await door.handler.ticket_secret(other_id)
    swapped = ticketcodes.rotating_code(code, other_secret, other_id, step)
    assert (await door.handler.scan(door.scan(event, swapped))).result is ScanResult.INVALID
    # The previous step still admits (a phone that showed it a moment ago).
    previous = ticketcodes.rotating_code(code, secret, ticket_id, step - 1)
    assert (await door.handler.scan(door.scan(event, previous))).result is ScanResult.ADMITTED
    current = ticketcodes.rotating_code(code, secret, ticket_id, step)
    assert (await door.handler.scan(door.scan(event, current))).result is ScanResult.ALREADY_CHECKED_IN
    # Time moves on: the code shown then is expired two steps later.
    door.clock.advance(2 * ticketcodes.ROTATION_STEP_SECONDS)
    assert (await door.handler.scan(door.scan(event, current))).result is ScanResult.EXPIRED_CODE


async def test_static_codes_admit_where_the_event_accepts_them(door: Door) -> None:
    event, other = new_event(), new_event()
    door.static.events = {event}
    _, code = await door.ticket(event)
    assert (await door.handler.scan(door.scan(event, code))).result is ScanResult.ADMITTED
    _, elsewhere = await door.ticket(other)
    assert (await door.handler.scan(door.scan(other, elsewhere))).result is ScanResult.EXPIRED_CODE


async def test_rotating_codes_of_bad_shape_or_from_the_future_are_invalid(door: Door) -> None:
    event = new_event()
    ticket_id, code = await door.ticket(event)
    secret = await door.handler.ticket_secret(ticket_id)
    step = ticketcodes.rotation_step(door.clock.now())
    future = ticketcodes.rotating_code(code, secret, ticket_id, step + 2)
    no_secret_id = str(uuid.uuid4())
    unsigned = ticketcodes.rotating_code("a.b.c", secret, no_secret_id, step)
    for bad in (future, unsigned, f"{code}~{step}~short", f"{code}~~", f"{code}~{step}"):
        assert (await door.handler.scan(door.scan(event, bad))).result is ScanResult.INVALID, bad
    # A genuine code of a ticket whose fan never fetched its secret: invalid.
    fresh_id, fresh_code = await door.ticket(event)
    guessed = ticketcodes.rotating_code(fresh_code, secret, fresh_id, step)
    assert (await door.handler.scan(door.scan(event, guessed))).result is ScanResult.INVALID
