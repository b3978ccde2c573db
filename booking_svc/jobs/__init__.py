"""Booking's background roles: the hold-expiry sweeper, the seat gauges and
the outbox relay."""
