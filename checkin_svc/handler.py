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

from boxoffice.ticketcodes import InvalidCode, TicketCodeVerifier, looks_signed
from checkin_svc.model import Admission, Scan, ScanOutcome, ScanResult
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
