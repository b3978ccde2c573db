"""Check-ins in Postgres (the :class:`~checkin_svc.ports.CheckInStore`),
beside the tickets the issuer writes.

An admission is one statement: the ticket is read with its void mark and,
when it is valid and of the scanned event, a check-in row inserted unless
one exists. The ticket's row is read ``FOR SHARE``: a transfer's claim or a
cancellation voiding it (which lock the row) makes the scan wait and then
read it void, and a claim that comes after the scan waits for it and finds
the check-in (``TICKET_CHECKED_IN``); never both. The primary key decides
between two gates at one instant: the second insert waits for the first and
does nothing. Only then, for a ticket admitted before, a second statement
reads the first check-in (a new statement sees the row the winner committed).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from boxoffice import db
from boxoffice.runtime import Pool
from checkin_svc import devices
from checkin_svc.devices import GateDevice
from checkin_svc.model import Admission, CheckIn, DoorEntry, DoorList, HeldTicket, Scan, TicketAtDoor
from checkin_svc.ports import CheckInStore

_ADMIT = """
WITH t AS (
    SELECT ticket_id, event_id, section_id, seat_label, voided_at IS NOT NULL AS void
      FROM tickets WHERE {match}
       FOR SHARE
), admitted AS (
    INSERT INTO checkins (ticket_id, event_id, gate_id, device_id, checked_in_at)
    SELECT ticket_id, event_id, %(gate)s, %(device)s, %(at)s
      FROM t WHERE NOT void AND event_id = %(event)s
    ON CONFLICT (ticket_id) DO NOTHING
    RETURNING gate_id, device_id, checked_in_at
)
SELECT t.ticket_id::text, t.event_id, t.section_id, t.seat_label, t.void,
       admitted.gate_id, admitted.device_id, admitted.checked_in_at
  FROM t LEFT JOIN admitted ON true
"""
_BY_ID = _ADMIT.format(match="ticket_id = %(ticket)s::uuid")
_BY_CODE = _ADMIT.format(match="code = %(ticket)s")
_LEAVE = """
WITH t AS (
    SELECT ticket_id, event_id, section_id, seat_label, voided_at IS NOT NULL AS void
      FROM tickets WHERE {match}
), moved AS (
    UPDATE checkins c SET inside = false, last_moved_at = %(at)s
      FROM t WHERE c.ticket_id = t.ticket_id AND t.event_id = %(event)s AND c.inside
    RETURNING c.gate_id, c.device_id, c.checked_in_at
)
SELECT t.ticket_id::text, t.event_id, t.section_id, t.seat_label, t.void,
       moved.gate_id, moved.device_id, moved.checked_in_at
  FROM t LEFT JOIN moved ON true
"""
_LEAVE_BY_ID = _LEAVE.format(match="ticket_id = %(ticket)s::uuid")
_LEAVE_BY_CODE = _LEAVE.format(match="code = %(ticket)s")
_REENTER = """
UPDATE checkins SET inside = true, last_moved_at = %s
 WHERE ticket_id = %s::uuid AND event_id = %s AND NOT inside
RETURNING 1
"""
_FIRST = "SELECT gate_id, device_id, checked_in_at FROM checkins WHERE ticket_id = %s::uuid"
_CONFLICT = """
INSERT INTO checkin_conflicts (event_id, ticket_id, device_id, gate_id, scanned_at,
                               first_device_id, first_gate_id, first_checked_in_at)
VALUES (%s, %s::uuid, %s, %s, %s, %s, %s, %s)
ON CONFLICT DO NOTHING
RETURNING 1
"""
_DOOR_LIST = """
SELECT t.ticket_id::text, t.event_id, t.section_id, t.seat_label, t.voided_at IS NOT NULL,
       c.gate_id, c.device_id, c.checked_in_at, coalesce(c.inside, false), s.secret
  FROM tickets t
  LEFT JOIN checkins c ON c.ticket_id = t.ticket_id
  LEFT JOIN ticket_secrets s ON s.ticket_id = t.ticket_id
 WHERE t.event_id = %(event)s
   AND (%(since)s::timestamptz IS NULL
        OR t.issued_at >= %(since)s OR t.voided_at >= %(since)s OR c.recorded_at >= %(since)s
        OR c.last_moved_at >= %(since)s OR s.created_at >= %(since)s)
 ORDER BY t.ticket_id
"""
# A cursor reaches back this far, so that a change whose transaction began
# before the list was read (and committed after) is listed the next time;
# the entries are states, so listing one twice changes nothing.
CURSOR_OVERLAP = timedelta(seconds=30)


class PgCheckInStore:
    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def admit_by_id(self, ticket_id: str, scan: Scan) -> Admission:
        return await db.retry_lost_once(lambda: self._admit(_BY_ID, ticket_id, scan))

    async def admit_by_code(self, code: str, scan: Scan) -> Admission:
        return await db.retry_lost_once(lambda: self._admit(_BY_CODE, code, scan))

    async def leave(self, key: str, scan: Scan, *, by_code: bool) -> Admission:
        statement = _LEAVE_BY_CODE if by_code else _LEAVE_BY_ID
        return await db.retry_lost_once(lambda: self._admit(statement, key, scan, read_first=False))

    async def reenter(self, ticket_id: str, scan: Scan) -> bool:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(_REENTER, (scan.scanned_at, ticket_id, scan.event_id))
            return await cur.fetchone() is not None

    async def _admit(self, statement: str, key: str, scan: Scan, *, read_first: bool = True) -> Admission:
        params = {
            "ticket": key,
            "event": scan.event_id,
            "gate": scan.gate_id,
            "device": scan.device_id,
            "at": scan.scanned_at,
        }
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(statement, params)
            row = await cur.fetchone()
            if row is None:
                return Admission(None)
            ticket = TicketAtDoor(str(row[0]), int(row[1]), str(row[2]), str(row[3]))
            if row[4]:
                return Admission(ticket, void=True)
            if ticket.event_id != scan.event_id:
                return Admission(ticket)
            if row[5] is not None:
                return Admission(ticket, admitted=True, first_checkin=CheckIn(row[5], row[6], row[7]))
            if not read_first:
                return Admission(ticket)
        # Admitted before: read the first check-in in a statement of its own.
        async with db.transaction(self._pool) as conn:
            return Admission(ticket, first_checkin=await _first(conn, ticket.ticket_id))

    async def record_conflict(self, ticket: TicketAtDoor, scan: Scan, first: CheckIn) -> bool:
        params = (
            ticket.event_id,
            ticket.ticket_id,
            scan.device_id,
            scan.gate_id,
            scan.scanned_at,
            first.device_id,
            first.gate_id,
            first.checked_in_at,
        )
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(_CONFLICT, params)
            return await cur.fetchone() is not None

    async def door_list(self, event_id: int, since: datetime | None) -> DoorList:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute("SELECT now()")
            now = await cur.fetchone()
            assert now is not None
            cur = await conn.execute(_DOOR_LIST, {"event": event_id, "since": since})
            entries = tuple(
                DoorEntry(
                    TicketAtDoor(str(row[0]), int(row[1]), str(row[2]), str(row[3])),
                    bool(row[4]),
                    None if row[5] is None else CheckIn(row[5], row[6], row[7]),
                    bool(row[8]),
                    None if row[9] is None else bytes(row[9]),
                )
                for row in await cur.fetchall()
            )
        return DoorList(entries, now[0] - CURSOR_OVERLAP)

    async def ticket_secret(self, ticket_id: str) -> bytes | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute("SELECT secret FROM ticket_secrets WHERE ticket_id = %s::uuid", (ticket_id,))
            row = await cur.fetchone()
        return None if row is None else bytes(row[0])

    async def issue_secret(self, ticket_id: str, fresh: bytes) -> bytes:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                INSERT INTO ticket_secrets (ticket_id, secret) VALUES (%s::uuid, %s)
                ON CONFLICT (ticket_id) DO UPDATE SET ticket_id = EXCLUDED.ticket_id
                RETURNING secret
                """,
                (ticket_id, fresh),
            )
            row = await cur.fetchone()
        assert row is not None
        return bytes(row[0])


async def _first(conn: AsyncConnection[TupleRow], ticket_id: str) -> CheckIn | None:
    cur = await conn.execute(_FIRST, (ticket_id,))
    row: Any = await cur.fetchone()
    return None if row is None else CheckIn(row[0], row[1], row[2])


async def held_ticket(pool: Pool, ticket_id: str) -> HeldTicket | None:
    """A ticket with its holder and stored code, as the issuer wrote it."""
    async with db.transaction(pool) as conn:
        cur = await conn.execute(
            """
            SELECT ticket_id::text, event_id, section_id, seat_label, customer_id, code, issued_at
              FROM tickets WHERE ticket_id = %s::uuid
            """,
            (ticket_id,),
        )
        row = await cur.fetchone()
    if row is None:
        return None
    ticket = TicketAtDoor(str(row[0]), int(row[1]), str(row[2]), str(row[3]))
    return HeldTicket(ticket, str(row[4]), str(row[5]), row[6])


def _compliance(store: PgCheckInStore) -> CheckInStore:
    return store


class PgGateDeviceStore:
    """Gate devices in Postgres (see :mod:`checkin_svc.devices`)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def create(self, event_id: int, name: str) -> tuple[GateDevice, str]:
        """A new device of ``event_id`` and its key, which is not kept."""
        key = devices.new_key()
        digest = devices.key_hash(key)
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                INSERT INTO gate_devices (device_id, event_id, name, key_sha256)
                VALUES (gen_random_uuid(), %s, %s, %s) RETURNING {_DEVICE_COLUMNS}
                """,
                (event_id, name, digest),
            )
            row = await cur.fetchone()
        assert row is not None
        return _device(row), key

    async def authenticate(self, key: str) -> GateDevice | None:
        """The device a key was made for; None for any other key or a revoked device."""
        digest = devices.key_hash(key)
        if digest is None:
            return None
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_DEVICE_COLUMNS} FROM gate_devices WHERE key_sha256 = %s AND revoked_at IS NULL", (digest,)
            )
            row = await cur.fetchone()
        return None if row is None else _device(row)

    async def revoke(self, device_id: str) -> GateDevice | None:
        """Revoke a device (again: no change); None when there is none."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                UPDATE gate_devices SET revoked_at = coalesce(revoked_at, now())
                 WHERE device_id = %s::uuid RETURNING {_DEVICE_COLUMNS}
                """,
                (device_id,),
            )
            row = await cur.fetchone()
        return None if row is None else _device(row)

    async def get(self, device_id: str) -> GateDevice | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_DEVICE_COLUMNS} FROM gate_devices WHERE device_id = %s::uuid", (device_id,)
            )
            row = await cur.fetchone()
        return None if row is None else _device(row)

    async def of_event(self, event_id: int) -> list[GateDevice]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_DEVICE_COLUMNS} FROM gate_devices WHERE event_id = %s ORDER BY created_at, device_id",
                (event_id,),
            )
            return [_device(row) for row in await cur.fetchall()]


_DEVICE_COLUMNS = "device_id::text, event_id, name, created_at, revoked_at"


def _device(row: Any) -> GateDevice:
    return GateDevice(str(row[0]), int(row[1]), str(row[2]), row[3], row[4])
