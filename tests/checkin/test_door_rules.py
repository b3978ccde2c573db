"""The check-in list carries the event's rules at the door (on its last
message, with the cursor), so that an offline device judges a static code
as Scan does: the kind's default where the event says nothing, the event's
own setting where it does."""

from __future__ import annotations

from typing import Any

import pytest

from gen.boxoffice.checkin.v1 import checkin_service_pb2 as pb
from tests.checkin.service import Service, checkin_service, with_key
from tests.checkin.test_service import make_event, make_ticket
from tests.support import Stores


@pytest.fixture
async def svc(stores: Stores) -> Any:
    async with checkin_service(stores) as service:
        yield service


async def _export(svc: Service, event: int, key: str, since: str = "") -> list[pb.ExportCheckInListResponse]:
    request = pb.ExportCheckInListRequest(event_id=event, since=since)
    return [part async for part in svc.door.ExportCheckInList(request, metadata=with_key(key))]


@pytest.mark.parametrize(
    ("kind", "static_codes", "reentry", "rules"),
    [
        ("CONCERT", None, False, (False, False)),  # rotating codes only
        ("FLIGHT", None, False, (True, False)),  # a boarding pass is printed
        ("CONCERT", True, True, (True, True)),
        ("FLIGHT", False, False, (False, False)),
    ],
)
async def test_the_list_carries_the_events_rules_on_its_last_message(
    svc: Service, kind: str, static_codes: bool | None, reentry: bool, rules: tuple[bool, bool]
) -> None:
    event = await make_event(svc.rt.pool(), kind, static_codes=static_codes, reentry=reentry)
    for _ in range(2):
        await make_ticket(svc, event)
    _, key = await svc.device(event)
    parts = await _export(svc, event, key)
    *head, last = parts
    assert head and all(not p.HasField("rules") and not p.cursor for p in head)
    assert last.cursor and last.HasField("rules")
    assert (last.rules.static_codes, last.rules.reentry) == rules
    # The changes since the cursor carry them too: a device learns a change
    # of rule at its next refresh.
    changes = (await _export(svc, event, key, last.cursor))[-1]
    assert changes.cursor and (changes.rules.static_codes, changes.rules.reentry) == rules


async def test_a_static_code_the_rules_refuse_is_expired_code_online(svc: Service) -> None:
    """What the gate page answers offline for a static code at an event
    whose rules refuse it: the door's own answer."""
    event = await make_event(svc.rt.pool())
    _, code = await make_ticket(svc, event)
    _, key = await svc.device(event)
    (last,) = (await _export(svc, event, key))[-1:]
    assert not last.rules.static_codes
    answer = await svc.door.Scan(pb.ScanRequest(event_id=event, code=code, gate_id="main"), metadata=with_key(key))
    assert answer.result == pb.SCAN_RESULT_EXPIRED_CODE
