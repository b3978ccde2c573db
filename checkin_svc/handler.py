"""The door's rules: what a scan answers (I15).

A code is judged before anything is read: a signed code's signature, shape
and event are checked with the public keys alone (:mod:`boxoffice.ticketcodes`),
so junk and forgeries cost the database nothing; so is a rotating code's
step (older than the previous one: ``EXPIRED_CODE``). A rotating code's mac
is then checked under its ticket's secret. A static code (a signed code
without rotation, or a ``TKT-`` code of before signed codes, which is looked
up) admits only at an event that accepts static codes; elsewhere it is
``EXPIRED_CODE``, as the contract says (a printed or screenshot code that
only its rotating form replaces). Then one statement
admits the ticket once (:class:`~checkin_svc.ports.CheckInStore`).
"""

from __future__ import annotations

import re
import secrets
import uuid
from collections.abc import Sequence
from datetime import datetime

from boxoffice import ticketcodes
from boxoffice.clock import Clock
from boxoffice.errors import InvalidArgument
from boxoffice.ticketcodes import InvalidCode, TicketClaims, TicketCodeVerifier, looks_signed
from checkin_svc.metrics import CheckInMetrics
from checkin_svc.model import Admission, Direction, DoorList, DoorRules, Scan, ScanOutcome, ScanResult, UploadedScan
from checkin_svc.ports import CheckInStore, ReEntry, StaticCodes

# Gate and device ids are names a venue gives (``north-1``).
NAME = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# An offline device uploads what it scanned since it lost the network.
MAX_UPLOAD = 10_000

# The codes tickets had before signed codes.
_LEGACY_CODE = re.compile(r"^TKT-[0-9A-F]{16}$")


class CheckInHandler:
    def __init__(
        self,
        store: CheckInStore,
        verifier: TicketCodeVerifier,
        clock: Clock,
        static: StaticCodes,
        metrics: CheckInMetrics,
        reentry: ReEntry,
    ) -> None:
        self._reentry = reentry
        self._metrics = metrics
        self._store = store
        self._verifier = verifier
        self._clock = clock
        self._static = static

    async def scan(self, scan: Scan) -> ScanOutcome:
        _check(scan)
        outcome = await self._decide(scan)
        self._metrics.scanned(scan.event_id, scan.gate_id, outcome.result)
        return outcome

    async def _decide(self, scan: Scan) -> ScanOutcome:
        code = scan.code.strip()
        rotating = ticketcodes.split_rotating(code)
        if rotating is not None:
            return await self._scan_rotating(rotating, scan)
        if _LEGACY_CODE.match(code):
            if not await self._static.allowed(scan.event_id):
                return ScanOutcome(ScanResult.EXPIRED_CODE)
            return await self._admit(code, scan, by_code=True)
        claims = self._claims(code)
        if claims is None:
            return ScanOutcome(ScanResult.INVALID)
        if claims.event_id != scan.event_id:
            return ScanOutcome(ScanResult.WRONG_EVENT)
        if not await self._static.allowed(scan.event_id):
            return ScanOutcome(ScanResult.EXPIRED_CODE)
        return await self._admit(claims.ticket_id, scan, by_code=False)

    async def _scan_rotating(self, parts: ticketcodes.RotatingParts, scan: Scan) -> ScanOutcome:
        claims = self._claims(parts.code)
        if claims is None:
            return ScanOutcome(ScanResult.INVALID)
        if claims.event_id != scan.event_id:
            return ScanOutcome(ScanResult.WRONG_EVENT)
        now = ticketcodes.rotation_step(self._clock.now())
        # The current and the previous step admit; the next one too, for a
        # phone whose clock runs a little ahead.
        if parts.step > now + 1:
            return ScanOutcome(ScanResult.INVALID)
        if parts.step < now - 1:
            return ScanOutcome(ScanResult.EXPIRED_CODE)
        secret = await self._store.ticket_secret(claims.ticket_id)
        expected = None if secret is None else ticketcodes.rotation_mac(secret, claims.ticket_id, parts.step)
        if expected is None or not ticketcodes.same_mac(expected, parts.mac):
            return ScanOutcome(ScanResult.INVALID)
        return await self._admit(claims.ticket_id, scan, by_code=False)

    async def _admit(self, key: str, scan: Scan, *, by_code: bool) -> ScanOutcome:
        """The ticket ``key`` names through the door, either way."""
        if scan.direction is Direction.OUT:
            left = _outcome(await self._store.leave(key, scan, by_code=by_code), scan)
            if left.result is ScanResult.ADMITTED:
                return ScanOutcome(ScanResult.LEFT, left.ticket, left.first_checkin)
            if left.result is ScanResult.ALREADY_CHECKED_IN:
                return ScanOutcome(ScanResult.NOT_INSIDE, left.ticket)
            return left
        admission = await (self._store.admit_by_code(key, scan) if by_code else self._store.admit_by_id(key, scan))
        outcome = _outcome(admission, scan)
        if (
            outcome.result is ScanResult.ALREADY_CHECKED_IN
            and outcome.ticket is not None
            and await self._reentry.allowed(scan.event_id)
            and await self._store.reenter(outcome.ticket.ticket_id, scan)
        ):
            return ScanOutcome(ScanResult.ADMITTED, outcome.ticket, outcome.first_checkin)
        return outcome

    def _claims(self, code: str) -> TicketClaims | None:
        """The claims of a valid signed code (its ticket id a UUID); None otherwise."""
        if not looks_signed(code):
            return None
        try:
            claims = self._verifier.verify(code)
            uuid.UUID(claims.ticket_id)
        except (InvalidCode, ValueError):
            return None
        return claims

    async def ticket_secret(self, ticket_id: str) -> bytes:
        """The secret of a ticket's rotating code, made on first asking
        (the caller has checked that the ticket is the asking fan's)."""
        return await self._store.issue_secret(str(uuid.UUID(ticket_id)), secrets.token_bytes(32))

    async def upload(self, scans: Sequence[Scan]) -> list[UploadedScan]:
        """An offline device's scans, each one it admitted on its own,
        applied in scan-time order (answers in the order given). A scan of
        a ticket another check-in came first for is a conflict, recorded
        once (a device that uploads a scan again records nothing new).
        Every scan is checked before any is applied."""
        if len(scans) > MAX_UPLOAD:
            raise InvalidArgument(
                f"an upload holds at most {MAX_UPLOAD} scans", reason="INVALID_FIELD", metadata={"field": "scans"}
            )
        for scan in scans:
            _check(scan)
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
                if await self._store.record_conflict(outcome.ticket, scan, first):
                    self._metrics.conflict(scan.event_id)
            answers[i] = UploadedScan(outcome, conflict)
        return [answers[i] for i in range(len(scans))]

    async def door_list(self, event_id: int, since: datetime | None) -> DoorList:
        """What an offline device needs: every ticket of the event, or the
        changes since its cursor (issued, voided, checked in)."""
        return await self._store.door_list(event_id, since)

    async def door_rules(self, event_id: int) -> DoorRules:
        """The event's rules, for an offline device to judge as :meth:`scan`
        does (a static code where they are refused is ``EXPIRED_CODE``)."""
        return DoorRules(await self._static.allowed(event_id), await self._reentry.allowed(event_id))


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


def _check(scan: Scan) -> None:
    """A scan the door can judge: a gate and a device named (a bad one is
    refused before anything is verified or read). Whatever the code is, it
    gets a verdict: a camera's misread is INVALID at the gate, not an error."""
    for field, value in (("gate_id", scan.gate_id), ("device_id", scan.device_id)):
        if not value:
            raise InvalidArgument(f"{field} is required", reason="FIELD_REQUIRED", metadata={"field": field})
        if not NAME.match(value):
            raise InvalidArgument(
                f"{field} must be 1 to 64 letters, digits or . _ : -", reason="INVALID_FIELD", metadata={"field": field}
            )
