"""The check-in service's boundaries."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from checkin_svc.model import Admission, CheckIn, DoorList, Scan, TicketAtDoor


class CheckInStore(Protocol):
    """Check-ins beside the tickets they admit."""

    async def admit_by_id(self, ticket_id: str, scan: Scan) -> Admission:
        """Admit ticket ``ticket_id`` of ``scan.event_id`` once: a ticket
        of another event, a void one or one admitted before is not admitted
        (:attr:`Admission.admitted` False), and says why."""
        ...

    async def admit_by_code(self, code: str, scan: Scan) -> Admission:
        """As :meth:`admit_by_id`, for a ticket found by its stored code
        (tickets issued before signed codes)."""
        ...

    async def record_conflict(self, ticket: TicketAtDoor, scan: Scan, first: CheckIn) -> bool:
        """Record that ``scan`` (an offline device's) admitted ``ticket``
        after ``first``, once per device and scan time: False when it was
        recorded before."""
        ...

    async def door_list(self, event_id: int, since: datetime | None) -> DoorList:
        """Every ticket of the event (``since`` None), or those whose
        issue, void or check-in was recorded since the cursor."""
        ...

    async def leave(self, key: str, scan: Scan, *, by_code: bool) -> Admission:
        """An exit scan of the ticket ``key`` names (its id, or its stored
        code when ``by_code``): :attr:`Admission.admitted` True when its
        holder was inside and is now out."""
        ...

    async def reenter(self, ticket_id: str, scan: Scan) -> bool:
        """Let a ticket whose holder left back in: True for the one scan
        that does (a conditional update)."""
        ...

    async def ticket_secret(self, ticket_id: str) -> bytes | None:
        """The secret of a ticket's rotating code; None until one was made."""
        ...

    async def issue_secret(self, ticket_id: str, fresh: bytes) -> bytes:
        """The ticket's secret: ``fresh`` if it had none, else the one it has."""
        ...


class ReEntry(Protocol):
    """Whether an event lets a ticket that left come back in."""

    async def allowed(self, event_id: int) -> bool: ...


class StaticCodes(Protocol):
    """Whether an event accepts static codes (printed, e-mailed: no rotation)."""

    async def allowed(self, event_id: int) -> bool: ...
