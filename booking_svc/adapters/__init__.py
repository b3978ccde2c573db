"""Booking's adapters: Postgres (:mod:`.postgres`) and the Redis seat gate
(:mod:`.gate`)."""
