"""BookingService: events, seats and holds, with Postgres as the arbiter."""
