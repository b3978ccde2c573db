"""Claimed ticket transfers on Postgres, as PaymentService tells of them
(RecordTicketTransfer): one row per transfer, keyed by its id, so a call
sent again changes nothing. The row is written under the locks
booking_hold_seats takes for the sender's and the receiver's counts in the
event (in its key order), so a hold decided at the same moment counts the
transfer or waits for it. What the rows say is read by booking_hold_seats
(the customers' ticket limit) and by the fan's cancel and its quote
(:func:`transferred_away`)."""

from __future__ import annotations

import uuid

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from booking_svc.adapters.postgres.base import PgBase, retry_tx_once
from booking_svc.model import ClaimedTransfer
from boxoffice.db import transaction
from boxoffice.errors import FailedPrecondition, NotFound

_LOCK_CUSTOMERS = """
SELECT pg_advisory_xact_lock(k.a, k.b)
  FROM (SELECT DISTINCT hashtext('booking.customer.' || %(event)s::bigint) AS a, hashtext(c) AS b
          FROM unnest(%(customers)s::text[]) AS c
         ORDER BY 1, 2
        OFFSET 0) k
"""
_INSERT = """
INSERT INTO claimed_transfers (transfer_id, event_id, hold_id, unit, generation, sender_id, receiver_id, claimed_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT DO NOTHING
RETURNING 1
"""
_STORED = """
SELECT event_id, hold_id, unit, generation, sender_id, receiver_id
  FROM claimed_transfers WHERE transfer_id = %s
"""
# The units of a booking whose last receiver is not its buyer.
_AWAY = """
SELECT count(*) FROM (
    SELECT DISTINCT ON (x.unit) x.receiver_id
      FROM claimed_transfers x
     WHERE x.hold_id = %s
     ORDER BY x.unit, x.generation DESC) last
 WHERE last.receiver_id <> %s
"""


class PgTransfers(PgBase):
    """Claimed transfers: recorded, and what they take from a booking."""

    async def record_transfer(self, transfer: ClaimedTransfer) -> bool:
        """Record ``transfer``; True when it was recorded before (nothing changes)."""

        async def work() -> bool:
            async with transaction(self._pool) as conn:
                cur = await conn.execute("SELECT event_id FROM holds WHERE hold_id = %s", (transfer.hold_id,))
                row = await cur.fetchone()
                if row is None or int(row[0]) != transfer.event_id:
                    raise NotFound(
                        f"booking {transfer.hold_id} does not exist in event {transfer.event_id}",
                        reason="HOLD_NOT_FOUND",
                        metadata={"hold_id": str(transfer.hold_id)},
                    )
                await conn.execute(
                    _LOCK_CUSTOMERS,
                    {"event": transfer.event_id, "customers": [transfer.sender_id, transfer.receiver_id]},
                )
                cur = await conn.execute(
                    _INSERT,
                    (
                        transfer.transfer_id,
                        transfer.event_id,
                        transfer.hold_id,
                        transfer.unit,
                        transfer.generation,
                        transfer.sender_id,
                        transfer.receiver_id,
                        transfer.claimed_at,
                    ),
                )
                if await cur.fetchone() is not None:
                    return False
                await _same_as_stored(conn, transfer)
                return True

        return await retry_tx_once(work)

    async def tickets_transferred_away(self, hold_id: uuid.UUID, buyer: str) -> int:
        """How many of the booking's tickets others than ``buyer`` hold by
        claimed transfers."""
        async with transaction(self._pool) as conn:
            return await transferred_away(conn, hold_id, buyer)


async def transferred_away(conn: AsyncConnection[TupleRow], hold_id: uuid.UUID, buyer: str) -> int:
    """How many of the booking's tickets others than ``buyer`` hold by
    claimed transfers (each unit's last receiver)."""
    cur = await conn.execute(_AWAY, (hold_id, buyer))
    row = await cur.fetchone()
    return 0 if row is None else int(row[0])


async def _same_as_stored(conn: AsyncConnection[TupleRow], transfer: ClaimedTransfer) -> None:
    cur = await conn.execute(_STORED, (transfer.transfer_id,))
    row = await cur.fetchone()
    stored = None if row is None else tuple(row)
    wanted = (
        transfer.event_id,
        transfer.hold_id,
        transfer.unit,
        transfer.generation,
        transfer.sender_id,
        transfer.receiver_id,
    )
    if stored != wanted:
        raise FailedPrecondition(
            "this transfer was recorded with other details",
            reason="TRANSFER_RECORD_MISMATCH",
            metadata={"transfer_id": str(transfer.transfer_id)},
        )
