"""Booking's background roles: the hold-expiry sweeper (:mod:`.sweeper`), the
seat gauges (:mod:`.gauges`) and the outbox relay (:mod:`.relay`)."""
