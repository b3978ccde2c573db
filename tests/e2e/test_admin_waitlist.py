"""The event file's waiting-list settings (``waitlist: {offer_minutes}``):
the command sends them, booking stores them where the offer pass reads them,
the operator reads them back (``event create``, ``stats``), left out they are
the default (15 minutes), and a bad value names its line and creates
nothing."""

from __future__ import annotations

import textwrap

import pytest

from boxoffice_cli.admin_files import BadFile, parse_event_file
from tests.e2e.admin_mesh import Mesh, event_yaml, mesh, new_event_id  # noqa: F401 (the fixture)
from tests.e2e.test_admin_catalogue import CONCERT


def _waitlist(text: str, block: str) -> str:
    """``text`` (an event file of test_admin_command) with a waitlist block."""
    return text.replace(
        "          max_seats_per_customer: 4\n", f"          waitlist: {block}\n          max_seats_per_customer: 4\n"
    )


def test_the_waitlist_block_becomes_the_request() -> None:
    plain = parse_event_file("c.yaml", CONCERT).event
    assert not plain.HasField("waitlist")  # the default
    set_ = parse_event_file("c.yaml", CONCERT.replace("time_zone:", "waitlist: {offer_minutes: 30}, time_zone:"))
    assert set_.event.waitlist.offer_minutes == 30
    for minutes in (1, 1440):
        bound = parse_event_file(
            "c.yaml", CONCERT.replace("time_zone:", f"waitlist: {{offer_minutes: {minutes}}}, time_zone:")
        )
        assert bound.event.waitlist.offer_minutes == minutes
    # A block written out over lines, as an operator may.
    text = _waitlist(event_yaml(new_event_id()), "\n            offer_minutes: 45")
    assert parse_event_file("e.yaml", textwrap.dedent(text).lstrip()).event.waitlist.offer_minutes == 45


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        (
            "waitlist: {offer_minutes: 0}",
            "c.yaml:2: event.waitlist.offer_minutes must be a whole number from 1 to 1,440, not '0'",
        ),
        (
            "waitlist: {offer_minutes: 1441}",
            "c.yaml:2: event.waitlist.offer_minutes must be a whole number from 1 to 1,440, not '1441'",
        ),
        (
            "waitlist: {offer_minutes: soon}",
            "c.yaml:2: event.waitlist.offer_minutes must be a whole number from 1 to 1,440, not 'soon'",
        ),
        (
            "waitlist: {offer_minutes: 2.5}",
            "c.yaml:2: event.waitlist.offer_minutes must be a whole number from 1 to 1,440, not '2.5'",
        ),
        ("waitlist: {offer: 30}", "c.yaml:2: event.waitlist: unknown key 'offer' (known: offer_minutes)"),
        ("waitlist: 30", "c.yaml:2: event.waitlist must be a mapping"),
    ],
)
def test_a_bad_waitlist_setting_names_its_line(block: str, problem: str) -> None:
    with pytest.raises(BadFile) as bad:
        parse_event_file("c.yaml", CONCERT.replace("time_zone:", f"{block},\n        time_zone:"))
    assert problem in bad.value.problems, bad.value.problems


async def test_the_offer_time_is_stored_and_read_back(mesh: Mesh) -> None:  # noqa: F811
    set_id, default_id = new_event_id(), new_event_id()
    created = await mesh.admin(
        "event", "create", mesh.file("set.yaml", _waitlist(event_yaml(set_id), "{offer_minutes: 30}"))
    )
    assert created.code == 0, created.err
    assert "  waiting list: offers last 30 minutes" in created.out.splitlines(), created.out
    stats = await mesh.admin("stats", str(set_id))
    assert "waiting list: offers last 30 minutes" in stats.out.splitlines(), stats.out

    created = await mesh.admin("event", "create", mesh.file("default.yaml", event_yaml(default_id)))
    assert created.code == 0, created.err
    assert "  waiting list: offers last 15 minutes" in created.out.splitlines(), created.out
    stats = await mesh.admin("stats", str(default_id))
    assert "waiting list: offers last 15 minutes" in stats.out.splitlines(), stats.out
    async with mesh.rt.pool().connection() as conn:
        cur = await conn.execute(
            "SELECT event_id, waitlist_offer_minutes FROM events WHERE event_id = ANY(%s)", ([set_id, default_id],)
        )
        stored = {r[0]: r[1] for r in await cur.fetchall()}
    # The column the offer pass reads.
    assert stored == {set_id: 30, default_id: 15}


async def test_a_bad_offer_time_exits_2_and_creates_nothing(mesh: Mesh) -> None:  # noqa: F811
    for minutes in ("0", "1441", "soon"):
        event_id = new_event_id()
        path = mesh.file("bad.yaml", _waitlist(event_yaml(event_id), f"{{offer_minutes: {minutes}}}"))
        result = await mesh.admin("event", "create", path)
        assert result.code == 2, result
        problems = result.err.splitlines()
        assert (
            f"{path}:6: event.waitlist.offer_minutes must be a whole number from 1 to 1,440, not {minutes!r}"
            in problems
        ), problems
        assert problems[-1] == "nothing was sent"
        missing = await mesh.admin("stats", str(event_id))
        assert missing.code == 1 and "NOT_FOUND EVENT_NOT_FOUND" in missing.err
