"""The booking service's settings, from the environment."""

from __future__ import annotations

from dataclasses import dataclass

from boxoffice.config import ConfigError, Env

# The stream booking's outbox is published to, and the consumer groups on it
# (the ticket issuer and payment's cancellation refunds). The relay creates
# every group before it publishes, so that trimming never drops what a group
# has not seen; the repair group is the one whose progress tells that Redis
# lost published rows.
STREAM = "ticket-issued"
STREAM_GROUPS = ("ticket-issuer", "payment-refunds")
REPAIR_GROUP = "ticket-issuer"


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """How the outbox relay publishes, and for whom."""

    stream: str
    groups: tuple[str, ...]
    repair_group: str | None
    batch_size: int
    idle_seconds: float
    # A booking event published this long ago and never processed, while
    # the repair group has caught up with the stream, was lost: publish it
    # again.
    repair_after_seconds: float

    @classmethod
    def from_env(cls, env: Env) -> RelayConfig:
        groups = tuple(g.strip() for g in env.string("BOXOFFICE_RELAY_GROUPS", ",".join(STREAM_GROUPS)).split(","))
        if not all(groups):
            raise ConfigError("BOXOFFICE_RELAY_GROUPS: a comma-separated list of consumer group names")
        repair = env.string("BOXOFFICE_RELAY_REPAIR_GROUP", REPAIR_GROUP).strip()
        if repair and repair not in groups:
            raise ConfigError("BOXOFFICE_RELAY_REPAIR_GROUP: must be one of BOXOFFICE_RELAY_GROUPS (or empty)")
        return cls(
            stream=env.string("BOXOFFICE_TICKET_STREAM", STREAM),
            groups=groups,
            repair_group=repair or None,
            batch_size=env.integer("BOXOFFICE_RELAY_BATCH_SIZE", 200, minimum=1, maximum=10_000),
            idle_seconds=env.number("BOXOFFICE_RELAY_IDLE_SECONDS", 0.05, minimum=0.001, maximum=60.0),
            repair_after_seconds=env.number("BOXOFFICE_RELAY_REPAIR_AFTER_SECONDS", 120.0, minimum=1.0),
        )


@dataclass(frozen=True, slots=True)
class BookingConfig:
    """How holds, the seat map and the sweeper behave."""

    # Redis SET NX gate per seat in front of Postgres (Postgres still decides).
    seat_gate: bool
    # How long a gate key may reject others; bounds how long a seat that
    # Postgres says is free can be turned away by the gate.
    seat_gate_ttl_seconds: float
    # Age of the per-process seat map cache.
    seat_map_max_age_seconds: float
    # Expiry sweeper: pause between passes and holds ended per transaction.
    sweep_interval_seconds: float
    sweep_batch_size: int
    # ExtendHold never takes a hold past this long after it was made.
    max_hold_lifetime_seconds: int
    # HoldSeats request ids are forgotten after this long.
    request_id_ttl_seconds: int
    # How often the per-section seat gauges are refreshed.
    stats_interval_seconds: float
    # At most this many sections (of events not yet started, the soonest
    # first) have seat gauges.
    seat_gauge_sections: int
    # How often each event's seats left are published for the admitter
    # (booking_svc.jobs.stock): a sold-out event stops admitting within
    # about this long plus an admit tick.
    stock_interval_seconds: float
    # How often the waiting lists' offer pass runs (booking_svc.jobs.waitlist):
    # a seat that comes back is offered within about this long (plus the
    # sweeper's interval for a hold that lapsed).
    waitlist_interval_seconds: float
    # HoldSeats calls that arrive together go to Postgres as one statement:
    # at most this many per statement (1: each call alone), and at most this
    # many such statements at once; a statement goes out while another is
    # out only when this many calls wait (0: half a batch); after a statement
    # returns with fewer waiting, the next lingers this long for more.
    hold_batch_max: int
    hold_batches_in_flight: int
    hold_batch_overlap_min: int
    hold_batch_linger_seconds: float

    @classmethod
    def from_env(cls, env: Env) -> BookingConfig:
        return cls(
            seat_gate=env.flag("BOXOFFICE_BOOKING_SEAT_GATE", False),
            seat_gate_ttl_seconds=env.number(
                "BOXOFFICE_BOOKING_SEAT_GATE_TTL_SECONDS", 2.0, minimum=0.05, maximum=10.0
            ),
            seat_map_max_age_seconds=env.number(
                "BOXOFFICE_BOOKING_SEAT_MAP_MAX_AGE_SECONDS", 2.0, minimum=0.0, maximum=10.0
            ),
            sweep_interval_seconds=env.number(
                "BOXOFFICE_BOOKING_SWEEP_INTERVAL_SECONDS", 1.0, minimum=0.05, maximum=300.0
            ),
            sweep_batch_size=env.integer("BOXOFFICE_BOOKING_SWEEP_BATCH_SIZE", 500, minimum=1, maximum=10_000),
            max_hold_lifetime_seconds=env.integer(
                "BOXOFFICE_BOOKING_MAX_HOLD_LIFETIME_SECONDS", 1800, minimum=60, maximum=86_400
            ),
            request_id_ttl_seconds=env.integer("BOXOFFICE_BOOKING_REQUEST_ID_TTL_SECONDS", 86_400, minimum=60),
            stats_interval_seconds=env.number(
                "BOXOFFICE_BOOKING_STATS_INTERVAL_SECONDS", 5.0, minimum=0.1, maximum=300.0
            ),
            seat_gauge_sections=env.integer("BOXOFFICE_BOOKING_SEAT_GAUGE_SECTIONS", 2000, minimum=0, maximum=100_000),
            stock_interval_seconds=env.number(
                "BOXOFFICE_BOOKING_STOCK_INTERVAL_SECONDS", 1.0, minimum=0.1, maximum=60.0
            ),
            waitlist_interval_seconds=env.number(
                "BOXOFFICE_BOOKING_WAITLIST_INTERVAL_SECONDS", 1.0, minimum=0.05, maximum=60.0
            ),
            hold_batch_max=env.integer("BOXOFFICE_BOOKING_HOLD_BATCH_MAX", 64, minimum=1, maximum=500),
            hold_batches_in_flight=env.integer("BOXOFFICE_BOOKING_HOLD_BATCHES_IN_FLIGHT", 2, minimum=1, maximum=16),
            hold_batch_overlap_min=env.integer("BOXOFFICE_BOOKING_HOLD_BATCH_OVERLAP_MIN", 0, minimum=0, maximum=500),
            hold_batch_linger_seconds=env.number(
                "BOXOFFICE_BOOKING_HOLD_BATCH_LINGER_SECONDS", 0.005, minimum=0.0, maximum=0.1
            ),
        )
