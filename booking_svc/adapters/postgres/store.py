"""The booking store on Postgres, the arbiter of every seat: one object made
of its parts (events and inventory, holds, changes to holds, expiry), each
in its own module over one pool."""

from __future__ import annotations

from booking_svc.adapters.postgres.catalogue import PgCatalogue
from booking_svc.adapters.postgres.changes import PgHoldChanges
from booking_svc.adapters.postgres.events import PgEvents
from booking_svc.adapters.postgres.holds import PgHolds
from booking_svc.adapters.postgres.sweep import PgSweep
from booking_svc.adapters.postgres.transfers import PgTransfers
from booking_svc.adapters.postgres.waitlist import PgWaitlist
from booking_svc.ports import BookingStore
from booking_svc.waitlist import WaitlistStore


class PgBookingStore(PgEvents, PgCatalogue, PgHolds, PgHoldChanges, PgSweep, PgTransfers, PgWaitlist):
    """:class:`booking_svc.ports.BookingStore` on Postgres; built with
    :class:`PgHolds`'s arguments (the pool, the hold batching, the test
    pause)."""


def _compliance(store: PgBookingStore) -> BookingStore:
    return store


def _waitlist_compliance(store: PgBookingStore) -> WaitlistStore:
    return store
