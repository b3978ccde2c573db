"""HoldSeats on Postgres, and reading holds.

Every hold goes through one SQL function, ``booking_hold_seats``, which
decides the rules for a list of holds in one statement: the calls that
arrive together go as one list (the store's :class:`MicroBatcher`), and a
lone call is a list of one. Each hold is all or nothing and a failing hold
fails alone; the implicit transaction commits on the server, so the counter
rows it moves are locked only until that commit, never across a round trip
to this process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from booking_svc.adapters.postgres import outcomes
from booking_svc.adapters.postgres.base import HOLD_COLUMNS, PgBase, Pool, hold_from_row, retry_deadlock_once
from booking_svc.model import Hold, QuantitySelection, SeatSelection, Selection
from boxoffice import deadline
from boxoffice.batching import MicroBatcher
from boxoffice.errors import DeadlineExceeded, Internal, Unavailable

_log = logging.getLogger("booking_svc.adapters.postgres.holds")


@dataclass(frozen=True, slots=True)
class HoldAttempt:
    """One HoldSeats call on its way to Postgres."""

    event_id: int
    customer_id: str
    selection: Selection
    hold_id: uuid.UUID
    request_id: str | None
    fingerprint: str
    now: datetime
    # When its caller stops waiting (time.monotonic()).
    deadline_at: float

    def request(self, timeout_ms: int) -> dict[str, Any]:
        """This hold as a ``booking_hold_request`` (its JSON form)."""
        seats = self.selection if isinstance(self.selection, SeatSelection) else None
        best = self.selection if isinstance(self.selection, QuantitySelection) else None
        return {
            "event_id": self.event_id,
            "customer_id": self.customer_id,
            "seat_ids": None if seats is None else sorted(seats.seat_ids),
            "section_id": None if best is None else best.section_id,
            "quantity": None if best is None else best.quantity,
            "hold_id": str(self.hold_id),
            "request_id": self.request_id,
            "fingerprint": self.fingerprint,
            "timeout_ms": timeout_ms,
        }


# The requests travel as one JSON array, read into booking_hold_request
# values in order.
_HOLD_SQL = (
    f"SELECT idx, outcome, detail, {HOLD_COLUMNS}, replayed FROM booking_hold_seats("
    "ARRAY(SELECT jsonb_populate_record(NULL::booking_hold_request, e.item)"
    " FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(item, n) ORDER BY e.n), %s, %s)"
).encode()


def _answer(attempt: HoldAttempt, row: Sequence[Any]) -> tuple[Hold, bool] | BaseException:
    """One row of ``booking_hold_seats``: the hold and whether it was
    replayed, or the error of its outcome."""
    outcome = row[1]
    if outcome is None:
        return hold_from_row(row[3:20]), bool(row[20])
    return outcomes.hold_error(outcome, row[2] or "", event_id=attempt.event_id, selection=attempt.selection)


class PgHolds(PgBase):
    """HoldSeats, and hold reads.

    ``race_pause_seconds`` is a test hook: HoldSeats sleeps that long inside
    its statement, between claiming the seats and moving the counters (once
    per batch), to hold race windows open. It is 0 (off) unless a test
    builds the store otherwise; nothing on the wire can set it.

    ``hold_batch_*`` shape the batches of HoldSeats calls (see
    :class:`boxoffice.batching.MicroBatcher`); ``hold_batch_max`` of 1 sends
    each call alone, as a batch of one.
    """

    def __init__(
        self,
        pool: Pool,
        *,
        race_pause_seconds: float = 0.0,
        hold_batch_max: int = 64,
        hold_batches_in_flight: int = 2,
        hold_batch_overlap_min: int | None = None,
        hold_batch_linger_seconds: float = 0.0,
    ) -> None:
        super().__init__(pool)
        self._race_pause_seconds = race_pause_seconds
        self.hold_batcher: MicroBatcher[HoldAttempt, tuple[Hold, bool]] | None = (
            MicroBatcher(
                self.hold_batch,
                name="booking-hold-batcher",
                max_batch=hold_batch_max,
                max_in_flight=hold_batches_in_flight,
                overlap_min=hold_batch_overlap_min,
                linger_seconds=hold_batch_linger_seconds,
            )
            if hold_batch_max > 1
            else None
        )

    async def hold_seats(
        self,
        *,
        event_id: int,
        customer_id: str,
        selection: Selection,
        hold_id: uuid.UUID,
        request_id: str | None,
        fingerprint: str,
        now: datetime,
    ) -> tuple[Hold, bool]:
        attempt = HoldAttempt(
            event_id=event_id,
            customer_id=customer_id,
            selection=selection,
            hold_id=hold_id,
            request_id=request_id,
            fingerprint=fingerprint,
            now=now,
            deadline_at=time.monotonic() + deadline.remaining(),
        )
        if self.hold_batcher is None:
            return await self.hold_one(attempt)
        return await self.hold_batcher.submit(attempt)

    async def hold_one(self, attempt: HoldAttempt) -> tuple[Hold, bool]:
        """One hold, as a batch of one; a deadlock is retried once."""

        async def once() -> tuple[Hold, bool]:
            [answer] = await self._decide([attempt])
            if isinstance(answer, BaseException):
                raise answer
            return answer

        with deadline.scope(max(attempt.deadline_at - time.monotonic(), 0.001)):
            return await retry_deadlock_once(once)

    async def hold_batch(self, attempts: list[HoldAttempt]) -> list[tuple[Hold, bool] | BaseException]:
        """Holds that arrived together, in one statement, each answered on
        its own. Holds that finished past their callers' deadlines roll the
        statement back (they are answered DEADLINE_EXCEEDED and the others
        sent again). Should the statement fail as a whole otherwise (it is
        not expected to), each hold is sent alone, so that none fails for
        another's sake."""
        try:
            return await self._decide(attempts)
        except psycopg.Error:
            _log.warning("hold batch failed; its holds are sent one by one", exc_info=True)
            singles = await asyncio.gather(*(self.hold_one(a) for a in attempts), return_exceptions=True)
            return list(singles)

    async def _decide(self, attempts: Sequence[HoldAttempt]) -> list[tuple[Hold, bool] | BaseException]:
        """Send the live attempts until each has its answer. A statement
        that fails other than by naming late holds raises (psycopg.Error)."""
        answers: list[tuple[Hold, bool] | BaseException | None] = [None] * len(attempts)
        live = list(range(len(attempts)))
        while live:
            began = time.monotonic()
            for i in live:
                if attempts[i].deadline_at - began <= 0.001:
                    answers[i] = DeadlineExceeded(
                        "deadline exceeded before the hold started", reason="DEADLINE_EXCEEDED"
                    )
            live = [i for i in live if answers[i] is None]
            if not live:
                break
            batch = [attempts[i] for i in live]
            remaining = [max(1, int((a.deadline_at - began) * 1000)) for a in batch]
            requests = json.dumps([a.request(ms) for a, ms in zip(batch, remaining, strict=True)])
            try:
                with deadline.scope(max(remaining) / 1000):
                    rows = await self._statement(
                        _HOLD_SQL, (requests, max(a.now for a in batch), self._race_pause_seconds)
                    )
            except (DeadlineExceeded, Unavailable) as err:
                for i in live:
                    answers[i] = err
                break
            except psycopg.Error as err:
                late = outcomes.late_holds(err)
                if not late:
                    raise
                for n in late:
                    answers[live[n - 1]] = outcomes.late_error()
                live = [i for n, i in enumerate(live, start=1) if n not in late]
                continue
            by_index = {int(row[0]): row for row in rows}
            for n, i in enumerate(live, start=1):
                row = by_index.get(n)
                answers[i] = (
                    Internal("the hold statement gave no answer for a hold", reason="INTERNAL")
                    if row is None
                    else _answer(attempts[i], row)
                )
            break
        return [a if a is not None else Internal("no answer", reason="INTERNAL") for a in answers]

    async def get_hold(self, hold_id: uuid.UUID) -> Hold | None:
        rows = await self._statement(
            f"SELECT {HOLD_COLUMNS} FROM hold_details WHERE hold_id = %s", (hold_id,), repeatable=True
        )
        return hold_from_row(rows[0]) if rows else None

    async def list_holds(
        self, *, event_id: int, customer_id: str | None, limit: int, after: tuple[datetime, uuid.UUID] | None
    ) -> list[Hold]:
        where = ["event_id = %s"]
        params: list[Any] = [event_id]
        if customer_id is not None:
            where.append("customer_id = %s")
            params.append(customer_id)
        if after is not None:
            where.append("(created_at, hold_id) < (%s, %s)")
            params.extend(after)
        params.append(limit)
        rows = await self._statement(
            f"SELECT {HOLD_COLUMNS} FROM hold_details WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, hold_id DESC LIMIT %s",
            params,
            repeatable=True,
        )
        return [hold_from_row(r) for r in rows]
