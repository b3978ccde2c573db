"""The event file's door rules (``checkin: {static_codes, reentry}``): the
command sends them, booking stores them where the check-in service reads
them, the operator reads them back (``event create``, ``stats``), a left-out
static_codes keeps the kind's default, and a bad value names its line and
creates nothing."""

from __future__ import annotations

import pytest

from boxoffice.clock import SystemClock
from boxoffice_cli.admin_files import BadFile, parse_event_file
from checkin_svc.adapters.events import DoorSettings, PgEventSettings
from tests.e2e.admin_mesh import Mesh, event_yaml, mesh, new_event_id  # noqa: F401 (the fixture)
from tests.e2e.test_admin_catalogue import CONCERT, FLIGHT


def _door(text: str, rules: str) -> str:
    """``text`` (an event file of admin_mesh) with a door block."""
    return text.replace(
        "          max_seats_per_customer: 4\n", f"          checkin: {rules}\n          max_seats_per_customer: 4\n"
    )


def test_the_checkin_block_becomes_the_request() -> None:
    plain = parse_event_file("c.yaml", CONCERT).event
    assert not plain.HasField("checkin")  # the defaults
    both = parse_event_file(
        "c.yaml", CONCERT.replace("time_zone:", "checkin: {static_codes: true, reentry: true}, time_zone:")
    ).event
    assert both.checkin.HasField("static_codes") and both.checkin.static_codes and both.checkin.reentry
    # A flight that refuses printed passes: false is sent as false, not left to the kind.
    rotating = parse_event_file("f.yaml", FLIGHT.replace("time_zone:", "checkin: {static_codes: false}, time_zone:"))
    assert rotating.event.checkin.HasField("static_codes") and not rotating.event.checkin.static_codes
    assert not rotating.event.checkin.reentry
    # Re-entry alone leaves static codes to the kind.
    again = parse_event_file("c.yaml", CONCERT.replace("time_zone:", "checkin: {reentry: true}, time_zone:")).event
    assert not again.checkin.HasField("static_codes") and again.checkin.reentry


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ("checkin: {static_codes: yes please}", "c.yaml:2: event.checkin.static_codes must be true or false"),
        ("checkin: {reentry: 1}", "c.yaml:2: event.checkin.reentry must be true or false, not '1'"),
        ("checkin: {static: true}", "c.yaml:2: event.checkin: unknown key 'static' (known: static_codes, reentry)"),
        ("checkin: true", "c.yaml:2: event.checkin must be a mapping"),
    ],
)
def test_a_bad_door_rule_names_its_line(block: str, problem: str) -> None:
    with pytest.raises(BadFile) as bad:
        parse_event_file("c.yaml", CONCERT.replace("time_zone:", f"{block},\n        time_zone:"))
    assert any(p.startswith(problem) for p in bad.value.problems), bad.value.problems


async def test_the_door_rules_reach_the_door_and_read_back(mesh: Mesh) -> None:  # noqa: F811
    door = PgEventSettings(mesh.rt.pool(), SystemClock())
    set_id, default_id = new_event_id(), new_event_id()
    created = await mesh.admin(
        "event", "create", mesh.file("set.yaml", _door(event_yaml(set_id), "{static_codes: true, reentry: true}"))
    )
    assert created.code == 0, created.err
    assert "  at the door: static codes admit, re-entry allowed" in created.out.splitlines(), created.out
    stats = await mesh.admin("stats", str(set_id))
    assert "at the door: static codes admit, re-entry allowed" in stats.out.splitlines(), stats.out
    assert await door.of(set_id) == DoorSettings(static_codes=True, reentry=True)

    created = await mesh.admin("event", "create", mesh.file("default.yaml", event_yaml(default_id)))
    assert created.code == 0, created.err
    stats = await mesh.admin("stats", str(default_id))
    assert "at the door: only rotating codes admit, no re-entry" in stats.out.splitlines(), stats.out
    assert await door.of(default_id) == DoorSettings(static_codes=False, reentry=False)
    async with mesh.rt.pool().connection() as conn:
        cur = await conn.execute(
            "SELECT event_id, checkin_static_codes, checkin_reentry FROM events WHERE event_id = ANY(%s)",
            ([set_id, default_id],),
        )
        stored = {r[0]: (r[1], r[2]) for r in await cur.fetchall()}
    # Left out, static codes stay NULL: the kind's default, not a copy of it.
    assert stored == {set_id: (True, True), default_id: (None, False)}


async def test_a_bad_door_rule_exits_2_and_creates_nothing(mesh: Mesh) -> None:  # noqa: F811
    event_id = new_event_id()
    path = mesh.file("bad.yaml", _door(event_yaml(event_id), "{static_codes: sometimes, reentry: true}"))
    result = await mesh.admin("event", "create", path)
    assert result.code == 2, result
    problems = result.err.splitlines()
    assert any(p.startswith(f"{path}:6: event.checkin.static_codes must be true or false") for p in problems), problems
    assert problems[-1] == "nothing was sent"
    missing = await mesh.admin("stats", str(event_id))
    assert missing.code == 1 and "NOT_FOUND EVENT_NOT_FOUND" in missing.err
