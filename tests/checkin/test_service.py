"""CheckInService and CheckInAdminService on a real gRPC server (I15):
gate devices authenticated by their key alone, the door's proofs over the
wire (one admission of 50 concurrent scans, INVALID before any query, the
wrong event, an expired rotating code, offline and online admitting the same
ticket), the events' own settings, and bad input refused with nothing
changed."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2

from boxoffice import audit, db, ticketcodes
from boxoffice.errors import from_rpc_error
from boxoffice.runtime import Pool
from boxoffice.ticketcodes import TicketClaims, TicketCodeSigner, TicketCodeVerifier
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as pb
from tests.checkin.harness import new_event
from tests.checkin.service import KEYS, Service, checkin_service, with_key
from tests.edge.asserting import as_fan
from tests.support import ManualClock, Stores


@pytest.fixture
async def svc(stores: Stores) -> Any:
    async with checkin_service(stores) as service:
        yield service


async def make_event(
    pool: Pool, kind: str = "CONCERT", *, static_codes: bool | None = None, reentry: bool = False
) -> int:
    """An event as booking keeps it, with its door settings."""
    event_id = new_event()
    async with db.transaction(pool) as conn:
        await conn.execute(
            """
            INSERT INTO events (event_id, display_name, kind, starts_at, hold_ttl_seconds, max_seats_per_customer,
                                checkin_static_codes, checkin_reentry)
            VALUES (%s, 'Door test', %s, now() + interval '1 day', 300, 4, %s, %s)
            """,
            (event_id, kind, static_codes, reentry),
        )
    return event_id


async def make_ticket(svc: Service, event_id: int, *, fan: str = "fan-1", code: str | None = None) -> tuple[str, str]:
    """A ticket as the issuer writes it, its code signed with the service's keys."""
    ticket_id = str(uuid.uuid4())
    signer = TicketCodeSigner(lambda: KEYS, svc.clock)
    issued = signer.now()
    code = code or signer.sign(TicketClaims(ticket_id, event_id, "A", "row C, seat 3", issued))
    async with db.transaction(svc.rt.pool()) as conn:
        await conn.execute(
            """
            INSERT INTO tickets (ticket_id, event_id, hold_id, unit, customer_id, section_id, seat_label,
                                 source_event_id, code, issued_at)
            VALUES (%s, %s, %s, 1, %s, 'A', 'row C, seat 3', %s, %s, to_timestamp(%s))
            """,
            (ticket_id, event_id, str(uuid.uuid4()), fan, str(uuid.uuid4()), code, issued),
        )
    return ticket_id, code


def _stamp(when: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(when)
    return stamp


async def _refused(call: Any) -> Any:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    return failed.value


async def _checkins(pool: Pool, ticket_id: str) -> int:
    async with db.transaction(pool) as conn:
        cur = await conn.execute("SELECT count(*) FROM checkins WHERE ticket_id = %s", (ticket_id,))
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_fifty_scans_of_one_ticket_from_five_devices_admit_once(svc: Service) -> None:
    event = await make_event(svc.rt.pool(), "FLIGHT")  # a boarding pass: a static code
    ticket_id, code = await make_ticket(svc, event)
    keys = [(await svc.device(event, f"Gate {i}"))[1] for i in range(5)]
    answers = await asyncio.gather(
        *(
            svc.door.Scan(
                pb.ScanRequest(event_id=event, code=code, gate_id=f"gate-{i % 5}"), metadata=with_key(keys[i % 5])
            )
            for i in range(50)
        )
    )
    assert Counter(a.result for a in answers) == {
        pb.SCAN_RESULT_ADMITTED: 1,
        pb.SCAN_RESULT_ALREADY_CHECKED_IN: 49,
    }
    (first,) = [a.first_checkin for a in answers if a.result == pb.SCAN_RESULT_ADMITTED]
    # Every answer names the one admission, and the device is the key's own.
    assert all(a.first_checkin == first and a.ticket.seat_label == "row C, seat 3" for a in answers)
    devices = {
        d.device_id for d in (await svc.admin.ListGateDevices(pb.ListGateDevicesRequest(event_id=event))).devices
    }
    assert first.device_id in devices
    assert await _checkins(svc.rt.pool(), ticket_id) == 1


async def test_a_code_with_one_byte_changed_is_invalid_without_a_database_query(svc: Service) -> None:
    event = await make_event(svc.rt.pool(), "FLIGHT")
    _, code = await make_ticket(svc, event)
    _, key = await svc.device(event)
    # The device's key is looked up once, then kept for a second.
    first = await svc.door.Scan(pb.ScanRequest(event_id=event, code="junk", gate_id="g1"), metadata=with_key(key))
    assert first.result == pb.SCAN_RESULT_INVALID
    pool = svc.rt.pool()
    changed = [code[:i] + ("A" if code[i] != "A" else "B") + code[i + 1 :] for i in range(0, len(code), 7)]
    before = pool.get_stats()["requests_num"]
    answers = [
        await svc.door.Scan(pb.ScanRequest(event_id=event, code=c, gate_id="g1"), metadata=with_key(key))
        for c in changed
        if c != code
    ]
    assert pool.get_stats()["requests_num"] == before
    assert {a.result for a in answers} == {pb.SCAN_RESULT_INVALID}
    assert all(not a.HasField("ticket") for a in answers)
    # The control: the code itself asks the database, and admits.
    good = await svc.door.Scan(pb.ScanRequest(event_id=event, code=code, gate_id="g1"), metadata=with_key(key))
    assert good.result == pb.SCAN_RESULT_ADMITTED
    assert pool.get_stats()["requests_num"] > before


async def test_the_events_settings_decide_static_codes_and_a_rotating_code_expires(svc: Service) -> None:
    pool = svc.rt.pool()
    concert = await make_event(pool)  # default: rotating codes only
    flight = await make_event(pool, "FLIGHT")  # default: static codes too
    printed = await make_event(pool, static_codes=True)
    other = await make_event(pool, "FLIGHT")
    ticket_id, code = await make_ticket(svc, concert, fan="ana")
    _, flight_code = await make_ticket(svc, flight)
    _, printed_code = await make_ticket(svc, printed)
    _, other_code = await make_ticket(svc, other)
    keys = {event: (await svc.device(event))[1] for event in (concert, flight, printed)}

    async def scan(event: int, text: str) -> int:
        answer = await svc.door.Scan(
            pb.ScanRequest(event_id=event, code=text, gate_id="main"), metadata=with_key(keys[event])
        )
        return int(answer.result)

    assert await scan(concert, code) == pb.SCAN_RESULT_EXPIRED_CODE  # a screenshot of the static code
    assert await scan(concert, other_code) == pb.SCAN_RESULT_WRONG_EVENT
    assert await scan(flight, flight_code) == pb.SCAN_RESULT_ADMITTED
    assert await scan(printed, printed_code) == pb.SCAN_RESULT_ADMITTED
    # The fan's page: the code and the secret, for the ticket's holder only.
    rotation = await svc.door.GetTicketRotation(
        pb.GetTicketRotationRequest(ticket_id=ticket_id), metadata=as_fan("ana")
    )
    assert rotation.code == code and len(rotation.secret) == 32 and rotation.step_seconds == 30
    step = ticketcodes.rotation_step(svc.clock.now())
    old = ticketcodes.rotating_code(code, rotation.secret, ticket_id, step - 2)
    assert await scan(concert, old) == pb.SCAN_RESULT_EXPIRED_CODE
    current = ticketcodes.rotating_code(code, rotation.secret, ticket_id, step)
    assert await scan(concert, current) == pb.SCAN_RESULT_ADMITTED
    # Thirty seconds later the same picture is the previous step: still
    # accepted (and already checked in); a minute later it has expired.
    svc.clock.advance(30)
    assert await scan(concert, current) == pb.SCAN_RESULT_ALREADY_CHECKED_IN
    svc.clock.advance(30)
    assert await scan(concert, current) == pb.SCAN_RESULT_EXPIRED_CODE


async def test_a_tickets_rotation_is_its_holders_alone(svc: Service) -> None:
    event = await make_event(svc.rt.pool())
    ticket_id, code = await make_ticket(svc, event, fan="bo")
    legacy_id, _ = await make_ticket(svc, event, fan="bo", code="TKT-" + uuid.uuid4().hex[:16].upper())
    mine = await svc.door.GetTicketRotation(pb.GetTicketRotationRequest(ticket_id=ticket_id), metadata=as_fan("bo"))
    again = await svc.door.GetTicketRotation(pb.GetTicketRotationRequest(ticket_id=ticket_id), metadata=as_fan("bo"))
    assert mine.secret == again.secret and mine.code == code
    for fan, asked in (("cy", ticket_id), ("bo", str(uuid.uuid4()))):
        err = await _refused(
            svc.door.GetTicketRotation(pb.GetTicketRotationRequest(ticket_id=asked), metadata=as_fan(fan))
        )
        refused = from_rpc_error(err)
        assert (err.code(), refused.reason, refused.metadata) == (
            grpc.StatusCode.NOT_FOUND,
            "TICKET_NOT_FOUND",
            {"ticket_id": asked},
        )
    err = await _refused(svc.door.GetTicketRotation(pb.GetTicketRotationRequest(ticket_id=ticket_id)))
    assert from_rpc_error(err).reason == "CUSTOMER_NOT_ASSERTED"
    # A ticket of before signed codes gets a signed code of it to rotate.
    legacy = await svc.door.GetTicketRotation(pb.GetTicketRotationRequest(ticket_id=legacy_id), metadata=as_fan("bo"))
    claims = TicketCodeVerifier(KEYS.public, svc.clock).verify(legacy.code)
    assert (claims.ticket_id, claims.event_id) == (legacy_id, event)


async def test_offline_and_online_admitting_one_ticket_make_one_checkin_and_one_conflict(svc: Service) -> None:
    event = await make_event(svc.rt.pool(), "FLIGHT")
    ticket_id, code = await make_ticket(svc, event)
    online, online_key = await svc.device(event, "Online")
    offline, offline_key = await svc.device(event, "Offline")
    # The offline device admitted it on its own a little earlier than the
    # online gate did; the online scan reaches the service first.
    scanned = datetime.now(UTC) - timedelta(minutes=2)
    admitted = await svc.door.Scan(
        pb.ScanRequest(event_id=event, code=code, gate_id="north"), metadata=with_key(online_key)
    )
    assert admitted.result == pb.SCAN_RESULT_ADMITTED
    upload = pb.UploadScansRequest(
        event_id=event,
        scans=[
            pb.OfflineScan(code=code, gate_id="south", scanned_at=_stamp(scanned)),
            pb.OfflineScan(code="not a code", gate_id="south", scanned_at=_stamp(scanned)),
        ],
    )
    answer = await svc.door.UploadScans(upload, metadata=with_key(offline_key))
    assert answer.conflicts == 1
    assert [(s.index, s.result, s.conflict) for s in answer.scans] == [
        (0, pb.SCAN_RESULT_ALREADY_CHECKED_IN, True),
        (1, pb.SCAN_RESULT_INVALID, False),
    ]
    assert answer.scans[0].first_checkin.device_id == online.device_id
    # Uploading again records nothing new.
    again = await svc.door.UploadScans(upload, metadata=with_key(offline_key))
    assert again.conflicts == 1
    async with db.transaction(svc.rt.pool()) as conn:
        cur = await conn.execute(
            "SELECT device_id, first_device_id FROM checkin_conflicts WHERE ticket_id = %s", (ticket_id,)
        )
        assert await cur.fetchall() == [(offline.device_id, online.device_id)]
    assert await _checkins(svc.rt.pool(), ticket_id) == 1


async def test_the_checkin_list_streams_every_ticket_then_changes_from_its_cursor(svc: Service) -> None:
    event = await make_event(svc.rt.pool(), "FLIGHT")
    tickets = [await make_ticket(svc, event) for _ in range(3)]
    _, key = await svc.device(event)

    async def export(since: str = "") -> tuple[list[pb.CheckInListEntry], str]:
        entries: list[pb.CheckInListEntry] = []
        cursor = ""
        async for part in svc.door.ExportCheckInList(
            pb.ExportCheckInListRequest(event_id=event, since=since), metadata=with_key(key)
        ):
            assert not cursor, "the cursor comes last"
            entries.extend(part.entries)
            cursor = part.cursor
        return entries, cursor

    everything, cursor = await export()
    assert sorted(e.ticket.ticket_id for e in everything) == sorted(t for t, _ in tickets)
    assert cursor and not any(e.HasField("first_checkin") for e in everything)
    await svc.door.Scan(pb.ScanRequest(event_id=event, code=tickets[0][1], gate_id="g"), metadata=with_key(key))
    changed, _ = await export(cursor)
    admitted = [e for e in changed if e.ticket.ticket_id == tickets[0][0]]
    assert admitted and admitted[0].inside and admitted[0].first_checkin.gate_id == "g"


async def test_device_keys_missing_unknown_revoked_or_of_another_event_are_refused(svc: Service) -> None:
    event, other = await make_event(svc.rt.pool(), "FLIGHT"), await make_event(svc.rt.pool(), "FLIGHT")
    ticket_id, code = await make_ticket(svc, event)
    device, key = await svc.device(event)
    _, other_key = await svc.device(other)
    scan = pb.ScanRequest(event_id=event, code=code, gate_id="north")
    export = pb.ExportCheckInListRequest(event_id=event)
    upload = pb.UploadScansRequest(
        event_id=event, scans=[pb.OfflineScan(code=code, gate_id="n", scanned_at=_stamp(datetime.now(UTC)))]
    )
    unknown = "bxd_" + "A" * 43

    async def refusal(metadata: Any) -> list[tuple[grpc.StatusCode, str]]:
        answers = []
        for call in (
            svc.door.Scan(scan, metadata=metadata),
            svc.door.UploadScans(upload, metadata=metadata),
            svc.door.ExportCheckInList(export, metadata=metadata).read(),
        ):
            err = await _refused(call)
            answers.append((err.code(), from_rpc_error(err).reason))
        return answers

    invalid = [(grpc.StatusCode.UNAUTHENTICATED, "DEVICE_KEY_INVALID")] * 3
    assert await refusal(()) == invalid
    assert await refusal(with_key(unknown)) == invalid
    assert await refusal(with_key("Device " + key)) == invalid
    assert await refusal(with_key(other_key)) == [(grpc.StatusCode.PERMISSION_DENIED, "DEVICE_WRONG_EVENT")] * 3
    err = await _refused(svc.door.Scan(scan, metadata=with_key(other_key)))
    assert from_rpc_error(err).metadata == {"device_event_id": str(other), "event_id": str(event)}
    # A device's key opens its own event's door; revoked, it opens nothing at once.
    assert (await svc.door.Scan(scan, metadata=with_key(key))).result == pb.SCAN_RESULT_ADMITTED
    revoked = await svc.admin.RevokeGateDevice(pb.RevokeGateDeviceRequest(device_id=device.device_id))
    assert revoked.device.HasField("revoked_at")
    assert await refusal(with_key(key)) == invalid
    assert await _checkins(svc.rt.pool(), ticket_id) == 1
    # The audit has the device's making and its revocation, never its key.
    entries = await audit.entries(svc.rt.pool(), service="boxoffice.checkin.v1.CheckInAdminService", limit=1000)
    mine = [e for e in entries if (e.after or {}).get("device_id") == device.device_id]
    assert sorted(e.method for e in mine) == ["CreateGateDevice", "RevokeGateDevice"]
    assert all(e.outcome == audit.OK and e.caller_role == "operator" for e in mine)
    assert key not in repr(entries)


async def test_the_device_list_survives_a_restart_of_the_service(stores: Stores) -> None:
    clock = ManualClock()
    async with checkin_service(stores, clock=clock) as first:
        event = await make_event(first.rt.pool(), "FLIGHT")
        _, code = await make_ticket(first, event)
        made = [await first.device(event, name) for name in ("North gate", "South gate")]
    async with checkin_service(stores, clock=clock) as second:
        listed = await second.admin.ListGateDevices(pb.ListGateDevicesRequest(event_id=event))
        assert [(d.device_id, d.name) for d in listed.devices] == [(d.device_id, d.name) for d, _ in made]
        answer = await second.door.Scan(
            pb.ScanRequest(event_id=event, code=code, gate_id="n"), metadata=with_key(made[1][1])
        )
        assert answer.result == pb.SCAN_RESULT_ADMITTED and answer.first_checkin.device_id == made[1][0].device_id


async def test_exit_scans_need_an_event_with_reentry(svc: Service) -> None:
    pool = svc.rt.pool()
    plain, again = await make_event(pool, "FLIGHT"), await make_event(pool, "FLIGHT", reentry=True)
    _, plain_code = await make_ticket(svc, plain)
    _, code = await make_ticket(svc, again)
    plain_key, key = (await svc.device(plain))[1], (await svc.device(again))[1]

    async def scan(event: int, text: str, k: str, direction: pb.Direction.ValueType = pb.DIRECTION_IN) -> int:
        request = pb.ScanRequest(event_id=event, code=text, gate_id="g", direction=direction)
        return int((await svc.door.Scan(request, metadata=with_key(k))).result)

    assert await scan(plain, plain_code, plain_key) == pb.SCAN_RESULT_ADMITTED
    err = await _refused(
        svc.door.Scan(
            pb.ScanRequest(event_id=plain, code=plain_code, gate_id="g", direction=pb.DIRECTION_OUT),
            metadata=with_key(plain_key),
        )
    )
    refused = from_rpc_error(err)
    assert (err.code(), refused.reason, refused.metadata) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "REENTRY_DISABLED",
        {"event_id": str(plain)},
    )
    assert [
        await scan(again, code, key),
        await scan(again, code, key, pb.DIRECTION_OUT),
        await scan(again, code, key, pb.DIRECTION_OUT),
        await scan(again, code, key),
        await scan(again, code, key),
    ] == [
        pb.SCAN_RESULT_ADMITTED,
        pb.SCAN_RESULT_LEFT,
        pb.SCAN_RESULT_NOT_INSIDE,
        pb.SCAN_RESULT_ADMITTED,
        pb.SCAN_RESULT_ALREADY_CHECKED_IN,
    ]


async def test_the_public_keys_verify_the_codes(svc: Service) -> None:
    answer = await svc.door.GetCheckInKeys(pb.GetCheckInKeysRequest(event_id=1))
    ((kid, public),) = KEYS.public().items()
    (jwk,) = answer.keys
    assert (jwk.kty, jwk.crv, jwk.kid, jwk.alg, jwk.use) == ("OKP", "Ed25519", kid, "EdDSA", "sig")
    assert jwk.x == ticketcodes.jwks({kid: public})["keys"][0]["x"]


async def test_bad_input_is_invalid_argument_and_changes_nothing(svc: Service) -> None:
    pool = svc.rt.pool()
    event = await make_event(pool, "FLIGHT")
    ticket_id, code = await make_ticket(svc, event, fan="di")
    device, key = await svc.device(event)
    now = datetime.now(UTC)
    good = pb.OfflineScan(code=code, gate_id="n", scanned_at=_stamp(now))
    cases: list[tuple[Any, str, str]] = [
        (
            svc.door.Scan(pb.ScanRequest(event_id=0, code=code, gate_id="n"), metadata=with_key(key)),
            "FIELD_REQUIRED",
            "event_id",
        ),
        (
            svc.door.Scan(pb.ScanRequest(event_id=event, code="", gate_id="n"), metadata=with_key(key)),
            "FIELD_REQUIRED",
            "code",
        ),
        (
            svc.door.Scan(pb.ScanRequest(event_id=event, code="x" * 1025, gate_id="n"), metadata=with_key(key)),
            "INVALID_FIELD",
            "code",
        ),
        (svc.door.Scan(pb.ScanRequest(event_id=event, code=code), metadata=with_key(key)), "FIELD_REQUIRED", "gate_id"),
        (
            svc.door.Scan(pb.ScanRequest(event_id=event, code=code, gate_id="north gate"), metadata=with_key(key)),
            "INVALID_FIELD",
            "gate_id",
        ),
        (
            svc.door.Scan(
                pb.ScanRequest(event_id=event, code=code, gate_id="n", scanned_at=_stamp(now + timedelta(hours=1))),
                metadata=with_key(key),
            ),
            "INVALID_FIELD",
            "scanned_at",
        ),
        (
            svc.door.Scan(
                pb.ScanRequest(event_id=event, code=code, gate_id="n", direction=pb.Direction.ValueType(7)),
                metadata=with_key(key),
            ),
            "INVALID_FIELD",
            "direction",
        ),
        (
            svc.door.UploadScans(
                pb.UploadScansRequest(event_id=event, scans=[good, pb.OfflineScan(code=code, gate_id="n")]),
                metadata=with_key(key),
            ),
            "FIELD_REQUIRED",
            "scans[1].scanned_at",
        ),
        (
            svc.door.UploadScans(
                pb.UploadScansRequest(
                    event_id=event, scans=[good, pb.OfflineScan(code=code, gate_id="", scanned_at=_stamp(now))]
                ),
                metadata=with_key(key),
            ),
            "FIELD_REQUIRED",
            "scans[1].gate_id",
        ),
        (
            svc.door.UploadScans(pb.UploadScansRequest(event_id=event, scans=[good] * 10_001), metadata=with_key(key)),
            "INVALID_FIELD",
            "scans",
        ),
        (
            svc.door.ExportCheckInList(
                pb.ExportCheckInListRequest(event_id=event, since="yesterday"), metadata=with_key(key)
            ).read(),
            "INVALID_FIELD",
            "since",
        ),
        (svc.door.GetCheckInKeys(pb.GetCheckInKeysRequest()), "FIELD_REQUIRED", "event_id"),
        (
            svc.door.GetTicketRotation(pb.GetTicketRotationRequest(ticket_id="t-1"), metadata=as_fan("di")),
            "INVALID_FIELD",
            "ticket_id",
        ),
        (svc.admin.CreateGateDevice(pb.CreateGateDeviceRequest(event_id=event, name="  ")), "FIELD_REQUIRED", "name"),
        (
            svc.admin.CreateGateDevice(pb.CreateGateDeviceRequest(event_id=event, name="n" * 101)),
            "INVALID_FIELD",
            "name",
        ),
        (svc.admin.CreateGateDevice(pb.CreateGateDeviceRequest(event_id=-1, name="Gate")), "INVALID_FIELD", "event_id"),
        (svc.admin.RevokeGateDevice(pb.RevokeGateDeviceRequest(device_id="north")), "INVALID_FIELD", "device_id"),
        (svc.admin.ListGateDevices(pb.ListGateDevicesRequest()), "FIELD_REQUIRED", "event_id"),
    ]
    for call, reason, field in cases:
        err = await _refused(call)
        refused = from_rpc_error(err)
        assert (err.code(), refused.reason, refused.metadata) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            reason,
            {"field": field},
        ), (reason, field, err)
    missing = str(uuid.uuid4())
    err = await _refused(svc.admin.RevokeGateDevice(pb.RevokeGateDeviceRequest(device_id=missing)))
    assert (err.code(), from_rpc_error(err).reason) == (grpc.StatusCode.NOT_FOUND, "DEVICE_NOT_FOUND")
    # Nothing changed: no check-in, no secret, one device (still valid).
    assert await _checkins(pool, ticket_id) == 0
    async with db.transaction(pool) as conn:
        cur = await conn.execute("SELECT count(*) FROM ticket_secrets WHERE ticket_id = %s", (ticket_id,))
        assert await cur.fetchone() == (0,)
    listed = await svc.admin.ListGateDevices(pb.ListGateDevicesRequest(event_id=event))
    assert [(d.device_id, d.HasField("revoked_at")) for d in listed.devices] == [(device.device_id, False)]
