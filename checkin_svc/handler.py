"""The door's rules: what a scan answers (I15).

A code is judged before anything is read: a signed code's signature, shape
and event are checked with the public keys alone (:mod:`boxoffice.ticketcodes`),
so junk and forgeries cost the database nothing. A code issued before signed
codes (``TKT-`` and 16 hex digits) is looked up. Then one statement admits
the ticket once (:class:`~checkin_svc.ports.CheckInStore`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from datetime import datetime

from boxoffice.ticketcodes import InvalidCode, TicketCodeVerifier, looks_signed
from checkin_svc.model import Admission, DoorList, Scan, ScanOutcome, ScanResult, UploadedScan
from checkin_svc.ports import CheckInStore

# The codes tickets had before signed codes.
_LEGACY_CODE = re.compile(r"^TKT-[0-9A-F]{16}$")


class CheckInHandler:
    def __init__(self, store: CheckInStore, verifier: TicketCodeVerifier) -> None:
        self._store = store
        self._verifier = verifier

    async def scan(self, scan: Scan) -> ScanOutcome:
        code = scan.code.strip()
        if _LEGACY_CODE.match(code):
            return _outcome(await self._store.admit_by_code(code, scan), scan)
        if not looks_signed(code):
            return ScanOutcome(ScanResult.INVALID)
        try:
            claims = self._verifier.verify(code)
            ticket_id = str(uuid.UUID(claims.ticket_id))
        except (InvalidCode, ValueError):
            return ScanOutcome(ScanResult.INVALID)
        if claims.event_id != scan.event_id:
            return ScanOutcome(ScanResult.WRONG_EVENT)
        return _outcome(await self._store.admit_by_id(ticket_id, scan), scan)

    async def upload(self, scans: Sequence[Scan]) -> list[UploadedScan]:
        """An offline device's scans, each one it admitted on its own,
        applied in scan-time order (answers in the order given). A scan of
        a ticket another check-in came first for is a conflict, recorded
        once (a device that uploads a scan again records nothing new)."""
        order = sorted(range(len(scans)), key=lambda i: (scans[i].scanned_at, i))
        answers: dict[int, UploadedScan] = {}
        for i in order:
            scan = scans[i]
            outcome = await self.scan(scan)
            first = outcome.first_checkin
            conflict = (
                outcome.result is ScanResult.ALREADY_CHECKED_IN
                and first is not None
                and outcome.ticket is not None
                and (first.device_id, first.checked_in_at) != (scan.device_id, scan.scanned_at)
            )
            if conflict:
                assert outcome.ticket is not None and first is not None
                await self._store.record_conflict(outcome.ticket, scan, first)
            answers[i] = UploadedScan(outcome, conflict)
        return [answers[i] for i in range(len(scans))]

    async def door_list(self, event_id: int, since: datetime | None) -> DoorList:
        """What an offline device needs: every ticket of the event, or the
        changes since its cursor (issued, voided, checked in)."""
        return await self._store.door_list(event_id, since)


def _outcome(admission: Admission, scan: Scan) -> ScanOutcome:
    ticket = admission.ticket
    if ticket is None:
        return ScanOutcome(ScanResult.UNKNOWN)
    if ticket.event_id != scan.event_id:
        return ScanOutcome(ScanResult.WRONG_EVENT)
    if admission.void:
        return ScanOutcome(ScanResult.VOID, ticket)
    result = ScanResult.ADMITTED if admission.admitted else ScanResult.ALREADY_CHECKED_IN
    return ScanOutcome(result, ticket, admission.first_checkin)
