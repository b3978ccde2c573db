"""`boxoffice admin gate-device` end to end: the command runs as its own
process against a real check-in server (mTLS, the operator's certificate),
makes a device and prints its key once, lists an event's devices, revokes
one (its key then opens nothing), every change audited without the key;
bad arguments and refused calls end with their exit codes and change
nothing."""

from __future__ import annotations

import uuid

import grpc
import pytest

from boxoffice import access, audit
from boxoffice.errors import from_rpc_error
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as pb
from tests.checkin.harness import new_event
from tests.checkin.service import checkin_service, with_key
from tests.e2e.harness import Result, run_admin
from tests.support import Stores


async def test_gate_devices_are_made_listed_and_revoked_by_the_command(stores: Stores) -> None:
    async with checkin_service(stores) as svc:

        async def admin(*args: str, role: str = access.OPERATOR) -> Result:
            files = stores.pki.files(role)
            return await run_admin(stores, {"checkin": svc.composed.server.address}, *args, files=files)

        event = new_event()
        made = await admin("gate-device", "create", str(event), "--name", "North gate")
        assert made.code == 0, made.err
        first, second = made.out.splitlines()
        device_id = first.split()[2]
        assert first == f"gate device {device_id} of event {event}: 'North gate'"
        key = second.removeprefix("key (shown once, never stored): ")
        assert key.startswith("bxd_") and len(key) == 47
        # The key opens the event's door: a verdict, not a refusal (a static
        # code at an event of rotating codes only).
        scan = pb.ScanRequest(event_id=event, code="TKT-0123456789ABCDEF", gate_id="north")
        assert (await svc.door.Scan(scan, metadata=with_key(key))).result == pb.SCAN_RESULT_EXPIRED_CODE
        assert (await admin("gate-device", "create", str(event), "--name", "South gate")).code == 0

        listed = await admin("gate-device", "list", str(event))
        assert listed.code == 0, listed.err
        lines = listed.out.splitlines()
        assert lines[0].split() == ["device", "name", "created", "revoked"]
        assert [line.split()[0] for line in lines[2:]] == [device_id, lines[3].split()[0]]
        assert "North gate" in lines[2] and lines[2].endswith("valid")

        revoked = await admin("gate-device", "revoke", device_id)
        assert revoked.code == 0, revoked.err
        assert revoked.out.startswith(f"gate device {device_id} ('North gate', event {event}) revoked at ")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await svc.door.Scan(scan, metadata=with_key(key))
        assert from_rpc_error(refused.value).reason == "DEVICE_KEY_INVALID"
        listed = await admin("gate-device", "list", str(event))
        assert not listed.out.splitlines()[2].endswith("valid")
        # Revoking again changes nothing and says when it was revoked.
        assert (await admin("gate-device", "revoke", device_id)).out == revoked.out

        entries = await audit.entries(svc.rt.pool(), service="boxoffice.checkin.v1.CheckInAdminService")
        mine = [e for e in entries if (e.after or {}).get("device_id") == device_id]
        assert [e.method for e in mine] == ["RevokeGateDevice", "RevokeGateDevice", "CreateGateDevice"]
        assert all(e.caller_role == access.OPERATOR for e in mine)
        assert key not in repr(entries)

        # Usage errors: nothing sent.
        for args in (
            ("gate-device", "create", "0", "--name", "Gate"),
            ("gate-device", "create", str(event), "--name", "  "),
            ("gate-device", "create", str(event), "--name", "n" * 101),
            ("gate-device", "create", str(event)),
            ("gate-device", "revoke", "north"),
            ("gate-device", "list", "x"),
        ):
            result = await admin(*args)
            assert result.code == 2 and result.out == "", (args, result)
        missing = str(uuid.uuid4())
        unknown = await admin("gate-device", "revoke", missing)
        assert unknown.code == 1
        assert unknown.err.startswith(f"error: revoking gate device {missing} failed: NOT_FOUND DEVICE_NOT_FOUND")
        # The edge's certificate is not an operator's.
        as_edge = await admin("gate-device", "create", str(event), "--name", "Sneaky", role=access.EDGE)
        assert as_edge.code == 1 and "PERMISSION_DENIED CALLER_NOT_ALLOWED" in as_edge.err
        listed = await admin("gate-device", "list", str(event))
        assert len(listed.out.splitlines()) == 4  # the header, its rule, two devices
        empty = await admin("gate-device", "list", str(new_event()))
        assert empty.code == 0 and empty.out.endswith("has no gate devices\n")
