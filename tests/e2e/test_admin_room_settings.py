"""`boxoffice admin` end to end, the waiting room's settings: the presence
grace, safety net and rate bounds from the event file and `queue update`,
the stats (the admitter's target rate and why) and a fan revoked as a
shadow; bad settings end with their exit codes and change nothing."""

from __future__ import annotations

import asyncio
import textwrap
from typing import Any

import grpc
import pytest

from boxoffice import audit
from boxoffice_cli.admin_files import BadFile, parse_event_file
from boxoffice_cli.admin_room import duration_text
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from queue_svc.rate import BookingHealth
from tests.e2e.admin_mesh import Mesh, edge_queue, event_yaml, mesh, new_event_id, operator_queue, stored_room

__all__ = ["mesh"]  # the fixture


# The new waiting-room settings, as the event file's waiting room takes them
# (base rate 25).
NEW_SETTINGS = """
          presence_grace_seconds: 600
          safety_net: true
          admission_rate_min_per_second: 10
          admission_rate_max_per_second: 40"""


def _row(out: str, name: str) -> str:
    """The value of a row of the stats' waiting-room table."""
    for line in out.splitlines():
        if line.startswith(f"{name}  "):
            return line.removeprefix(name).strip()
    raise AssertionError(f"no row {name!r} in:\n{out}")


async def test_the_new_waiting_room_settings_round_trip_through_file_update_and_stats(mesh: Mesh) -> None:
    event_id = new_event_id()
    path = mesh.file("event.yaml", event_yaml(event_id, room_extra=NEW_SETTINGS))
    created = await mesh.admin("event", "create", path)
    assert created.code == 0, created.err
    assert "presence grace 10m, safety net on, rate adapts from 10/s to 40/s" in created.out, created.out
    room = await stored_room(mesh, event_id)
    assert room.presence_grace.seconds == 600 and room.safety_net is True
    assert (room.admission_rate_min_per_second, room.admission_rate_max_per_second) == (10, 40)

    stats = await mesh.admin("stats", str(event_id))
    assert stats.code == 0, stats.err
    assert _row(stats.out, "presence grace") == "10m"
    assert _row(stats.out, "safety net") == "on"
    assert _row(stats.out, "rate bounds") == "10/s to 40/s"

    # Each setting alone; the others, and the rest of the room, stay as they were.
    steps = [
        (["--presence-grace", "2h"], (7200, True, 10, 40)),
        (["--safety-net", "off"], (7200, False, 10, 40)),
        (["--rate-min", "0"], (7200, False, 0, 40)),
        (["--rate-max", "25"], (7200, False, 0, 25)),
        (["--presence-grace", "90", "--safety-net", "on", "--rate-min", "5", "--rate-max", "0"], (90, True, 5, 0)),
    ]
    for flags, expected in steps:
        updated = await mesh.admin("queue", "update", str(event_id), *flags)
        assert updated.code == 0, (flags, updated.err)
        room = await stored_room(mesh, event_id)
        got = (
            room.presence_grace.seconds,
            room.safety_net,
            room.admission_rate_min_per_second,
            room.admission_rate_max_per_second,
        )
        assert got == expected, flags
        assert (room.admission_rate_per_second, room.max_active_shoppers, room.session_length.seconds) == (25, 100, 600)
        assert not room.paused
    assert "presence grace 1m 30s, safety net on, rate adapts from 5/s to the base rate" in updated.out, updated.out
    stats = await mesh.admin("stats", str(event_id))
    assert _row(stats.out, "rate bounds") == "5/s to the base rate"
    assert _row(stats.out, "presence grace") == "1m 30s"

    # A file without the settings gets the service's defaults.
    plain_id = new_event_id()
    assert (await mesh.admin("event", "create", mesh.file("plain.yaml", event_yaml(plain_id)))).code == 0
    plain = await stored_room(mesh, plain_id)
    assert (plain.presence_grace.seconds, plain.safety_net) == (300, False)
    assert (plain.admission_rate_min_per_second, plain.admission_rate_max_per_second) == (0, 0)

    # Every update is audited as the operator's UpdateWaitingRoom.
    rows = [
        r
        for r in await audit.entries(mesh.rt.pool(), limit=1000)
        if (r.request.get("config") or {}).get("event_id") == str(event_id)
    ]
    assert sorted(r.method for r in rows) == ["CreateWaitingRoom", *["UpdateWaitingRoom"] * len(steps)]
    assert {r.outcome for r in rows} == {"OK"}


async def test_bad_new_settings_exit_2_name_their_lines_and_create_nothing(mesh: Mesh) -> None:
    event_id = new_event_id()
    bad = """
          presence_grace_seconds: 59
          safety_net: maybe
          admission_rate_min_per_second: 26
          admission_rate_max_per_second: 24"""
    path = mesh.file("bad.yaml", event_yaml(event_id, room_extra=bad))
    result = await mesh.admin("event", "create", path)
    assert result.code == 2, result
    assert result.err.splitlines()[-1] == "nothing was sent"
    problems = set(result.err.splitlines())
    assert {
        f"{path}:25: waiting_room.presence_grace_seconds must be a whole number from 60 to 86,400, not '59'",
        f"{path}:26: waiting_room.safety_net must be true or false, not 'maybe'",
        f"{path}:27: waiting_room.admission_rate_min_per_second (26) must not be above admission_rate_per_second (25)",
        f"{path}:28: waiting_room.admission_rate_max_per_second (24) must not be below admission_rate_per_second (25)",
    } <= problems, result.err
    missing = await mesh.admin("stats", str(event_id))
    assert missing.code == 1 and "NOT_FOUND EVENT_NOT_FOUND" in missing.err
    async with operator_queue(mesh) as admin:
        with pytest.raises(grpc.aio.AioRpcError) as no_room:
            await admin.GetWaitingRoom(apb.GetWaitingRoomRequest(event_id=event_id))
    assert no_room.value.code() == grpc.StatusCode.NOT_FOUND

    # A bound out of range in the file, alone, is refused the same way.
    over = mesh.file("over.yaml", event_yaml(event_id, room_extra="\n          admission_rate_max_per_second: 100001"))
    refused = await mesh.admin("event", "create", over)
    assert refused.code == 2 and "admission_rate_max_per_second must be a whole number from 0 to 100,000" in refused.err
    assert (await mesh.admin("stats", str(event_id))).code == 1


async def test_a_bad_update_changes_nothing(mesh: Mesh) -> None:
    event_id = new_event_id()
    assert (
        await mesh.admin("event", "create", mesh.file("e.yaml", event_yaml(event_id, room_extra=NEW_SETTINGS)))
    ).code == 0
    before = await stored_room(mesh, event_id)
    for flags in (
        [],
        ["--presence-grace", "59s"],
        ["--presence-grace", "25h"],
        ["--presence-grace", "5 minutes"],
        ["--safety-net", "yes"],
        ["--rate-min", "-1"],
        ["--rate-max", "100001"],
    ):
        result = await mesh.admin("queue", "update", str(event_id), *flags)
        assert result.code == 2, (flags, result)
    # What only the service knows (the base rate is 25): exit 1 with the field.
    for flag, value, field in (("--rate-min", "26", "min"), ("--rate-max", "24", "max")):
        result = await mesh.admin("queue", "update", str(event_id), flag, value)
        assert result.code == 1, result
        assert "INVALID_ARGUMENT" in result.err and f"field=config.admission_rate_{field}_per_second" in result.err
    assert await stored_room(mesh, event_id) == before
    unknown = await mesh.admin("queue", "update", str(new_event_id()), "--safety-net", "on")
    assert unknown.code == 1 and "NOT_FOUND EVENT_NOT_FOUND" in unknown.err


async def _position(mesh: Mesh, event_id: int, fan: str) -> Any:
    async with edge_queue(mesh) as fans:
        reply = await fans.GetQueuePosition(qpb.GetQueuePositionRequest(event_id=event_id, customer_id=fan))
    return reply.position


async def _tick_until_admitted(mesh: Mesh, event_id: int, fan: str) -> None:
    """Admit ticks until ``fan`` is admitted (a bound for a hung test)."""
    await mesh.queue.admitter.refresh()
    async with asyncio.timeout(20):
        while (await _position(mesh, event_id, fan)).state != qpb.QUEUE_STATE_ADMITTED:
            await mesh.queue.admitter.tick_event(event_id, 1)
            await asyncio.sleep(0.05)


async def test_revoke_shadow_answers_shadowed_and_the_fan_is_passed_over_until_unshadowed(mesh: Mesh) -> None:
    event_id = new_event_id()
    assert (await mesh.admin("event", "create", mesh.file("event.yaml", event_yaml(event_id)))).code == 0
    assert (await mesh.admin("queue", "open", str(event_id))).code == 0
    async with edge_queue(mesh) as fans:
        for fan in ("fan-1", "fan-2"):
            await fans.JoinQueue(qpb.JoinQueueRequest(event_id=event_id, customer_id=fan))

    shadowed = await mesh.admin("revoke", str(event_id), "fan-1", "--shadow")
    assert shadowed.code == 0, shadowed.err
    assert shadowed.out.strip() == f"event {event_id} customer fan-1: WAITING, shadowed (changed)"
    again = await mesh.admin("revoke", str(event_id), "fan-1", "--shadow")
    assert again.out.strip() == f"event {event_id} customer fan-1: WAITING, shadowed (unchanged)"

    # Admission passes fan-1 over: fan-2, behind them, goes in.
    await _tick_until_admitted(mesh, event_id, "fan-2")
    assert (await _position(mesh, event_id, "fan-1")).state == qpb.QUEUE_STATE_WAITING

    unshadowed = await mesh.admin("revoke", str(event_id), "fan-1", "--unshadow")
    assert unshadowed.code == 0, unshadowed.err
    assert unshadowed.out.strip() == f"event {event_id} customer fan-1: WAITING, not shadowed (changed)"
    await _tick_until_admitted(mesh, event_id, "fan-1")

    actions = [
        r.request.get("action")
        for r in reversed(await audit.entries(mesh.rt.pool(), limit=1000))
        if r.method == "RevokeCustomer" and r.request.get("event_id") == str(event_id)
    ]
    assert actions == ["REVOKE_ACTION_SHADOW", "REVOKE_ACTION_SHADOW", "REVOKE_ACTION_UNSHADOW"]


async def test_stats_show_the_admitters_target_rate_and_why(mesh: Mesh) -> None:
    event_id = new_event_id()
    path = mesh.file("event.yaml", event_yaml(event_id, room_extra=NEW_SETTINGS))
    assert (await mesh.admin("event", "create", path)).code == 0
    assert (await mesh.admin("queue", "open", str(event_id))).code == 0
    before = await mesh.admin("stats", str(event_id))
    assert _row(before.out, "target rate") == "25.0/s (the base rate)"

    # Booking's holds take 2 s at p99 (the threshold is 1 s): the base rate
    # 25/s is halved, within the room's least rate, 10/s.
    slow = BookingHealth(holds=100, errors=0, p50_ms=200.0, p99_ms=2000.0)
    admitter = mesh.queue.admitter
    await admitter.refresh()
    await admitter.tick_event(event_id, 1, health=slow)  # decides the next tick's target
    await admitter.tick_event(event_id, 1, health=slow)  # runs at it, and publishes it
    stats = await mesh.admin("stats", str(event_id))
    assert stats.code == 0, stats.err
    assert _row(stats.out, "target rate") == "12.5/s (lowered: booking is slow)"

    # Slower still: held at the least rate.
    slower = BookingHealth(holds=100, errors=0, p50_ms=200.0, p99_ms=10_000.0)
    await admitter.tick_event(event_id, 1, health=slower)
    await admitter.tick_event(event_id, 1, health=slower)
    bounded = await mesh.admin("stats", str(event_id))
    assert _row(bounded.out, "target rate") == "10.0/s (held at the room's bound)"


async def test_new_usage_errors_exit_2(mesh: Mesh) -> None:
    assert (await mesh.admin("revoke", "5", "fan", "--shadow", "--unshadow")).code == 2
    assert (await mesh.admin("queue", "update", "5")).code == 2
    assert (await mesh.admin("queue", "update", "zero", "--safety-net", "on")).code == 2
    create_help = await mesh.admin("event", "create", "--help", tls=False)
    for key in (
        "presence_grace_seconds",
        "safety_net",
        "admission_rate_min_per_second",
        "admission_rate_max_per_second",
    ):
        assert key in create_help.out, key
    update_help = await mesh.admin("queue", "update", "--help", tls=False)
    assert update_help.code == 0
    for flag in ("--presence-grace", "--safety-net", "--rate-min", "--rate-max"):
        assert flag in update_help.out, flag


def test_durations_read_as_operators_write_them() -> None:
    assert [duration_text(s) for s in (0, 59, 60, 90, 300, 3600, 5400, 86_400)] == [
        "0s",
        "59s",
        "1m",
        "1m 30s",
        "5m",
        "1h",
        "1h 30m",
        "24h",
    ]


def test_the_new_settings_become_the_waiting_room_request() -> None:
    spec = parse_event_file("event.yaml", textwrap.dedent(event_yaml(77, room_extra=NEW_SETTINGS)).lstrip())
    assert spec.waiting_room is not None
    room = spec.waiting_room.config
    assert room.HasField("presence_grace") and room.presence_grace.seconds == 600
    assert room.safety_net is True
    assert (room.admission_rate_min_per_second, room.admission_rate_max_per_second) == (10, 40)
    unset = parse_event_file("event.yaml", textwrap.dedent(event_yaml(78)).lstrip())
    assert unset.waiting_room is not None and not unset.waiting_room.config.HasField("presence_grace")
    # Without a base rate, the bounds are checked against the service's default (50).
    text = "waiting_room:\n  opens_at: 2026-06-01T09:00:00Z\n  admission_rate_min_per_second: 51\n"
    with pytest.raises(BadFile) as bad:
        parse_event_file(
            "f.yaml",
            "event: {id: 5, name: n, kind: concert, starts_at: 2026-07-01T20:00:00Z}\n"
            "sections: [{id: A, kind: seated, price: {currency: EUR, amount_minor: 1}}]\n" + text,
        )
    assert bad.value.problems == [
        "f.yaml:5: waiting_room.admission_rate_min_per_second (51) must not be above admission_rate_per_second (50)"
    ]
