"""Booking's Postgres adapter: :class:`PgBookingStore` implements
:class:`booking_svc.ports.BookingStore` over the SQL functions of
``booking_svc/sql`` (one hold path, ``booking_hold_seats``; one place
counters move, ``booking_move_counters``), and :mod:`.outcomes` is the one
place their outcomes become domain errors."""

from booking_svc.adapters.postgres.base import HOLD_COLUMNS, Pool, hold_from_row, retry_deadlock_once
from booking_svc.adapters.postgres.holds import HoldAttempt
from booking_svc.adapters.postgres.store import PgBookingStore

__all__ = ["HOLD_COLUMNS", "HoldAttempt", "PgBookingStore", "Pool", "hold_from_row", "retry_deadlock_once"]
