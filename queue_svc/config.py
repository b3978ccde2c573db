"""The queue service's process settings, read from the environment."""

from __future__ import annotations

from dataclasses import dataclass

from boxoffice.config import Env


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """How often the admitter ticks and watchers refresh, and join limits."""

    # The admitter runs one admit script per event this often.
    tick_seconds: float
    # Each process reads a watched event's progress this often.
    watch_interval_seconds: float
    # The admitter re-reads the events (and re-mirrors their configuration).
    event_refresh_seconds: float
    # Joins allowed per account / per client in each window; 0 disables.
    join_limit_per_account: int
    join_limit_per_client: int
    join_limit_window_seconds: float
    # Budget of each Redis call a stream makes (streams carry no deadline);
    # generous, as a burst of stream opens queues many such calls at once.
    stream_call_seconds: float
    # How often a process reports the fans its position watchers follow as
    # present (well within the shortest presence grace, one minute).
    presence_report_seconds: float = 20.0
    # The adaptive rate: booking counts as slow over this hold p99 and as
    # failing over this error ratio; its published health counts while this
    # fresh; no-shows are measured over this window.
    booking_slow_p99_ms: float = 1000.0
    booking_error_ratio: float = 0.05
    booking_health_max_age_seconds: float = 15.0
    # Booking's published seats left (the sold-out verdict) count while
    # this fresh; older, the room keeps its sold-out flag as it is.
    booking_stock_max_age_seconds: float = 15.0
    no_show_window_seconds: float = 120.0
    # How often the draw recorder copies pre-queue placements to Postgres
    # (and, at opening, seals the pre-queue and reveals its seed).
    draw_record_seconds: float = 1.0
    # How often the lifecycle recorder copies the fans' lifecycle log to
    # Postgres, and how many days of it Postgres keeps.
    lifecycle_record_seconds: float = 1.0
    lifecycle_retention_days: int = 90

    @classmethod
    def from_env(cls, env: Env) -> QueueSettings:
        return cls(
            tick_seconds=env.number("BOXOFFICE_QUEUE_TICK_SECONDS", 0.5, minimum=0.01, maximum=60.0),
            watch_interval_seconds=env.number(
                "BOXOFFICE_QUEUE_WATCH_INTERVAL_SECONDS", 1.0, minimum=0.01, maximum=60.0
            ),
            event_refresh_seconds=env.number("BOXOFFICE_QUEUE_EVENT_REFRESH_SECONDS", 5.0, minimum=0.1, maximum=600.0),
            join_limit_per_account=env.integer(
                "BOXOFFICE_QUEUE_JOIN_LIMIT_PER_ACCOUNT", 20, minimum=0, maximum=1_000_000
            ),
            join_limit_per_client=env.integer(
                "BOXOFFICE_QUEUE_JOIN_LIMIT_PER_CLIENT", 200, minimum=0, maximum=1_000_000
            ),
            join_limit_window_seconds=env.number(
                "BOXOFFICE_QUEUE_JOIN_LIMIT_WINDOW_SECONDS", 10.0, minimum=1.0, maximum=3600.0
            ),
            stream_call_seconds=env.number("BOXOFFICE_QUEUE_STREAM_CALL_SECONDS", 20.0, minimum=0.1, maximum=120.0),
            presence_report_seconds=env.number(
                "BOXOFFICE_QUEUE_PRESENCE_REPORT_SECONDS", 20.0, minimum=0.1, maximum=30.0
            ),
            booking_slow_p99_ms=env.number(
                "BOXOFFICE_QUEUE_BOOKING_SLOW_P99_MS", 1000.0, minimum=1.0, maximum=60_000.0
            ),
            booking_error_ratio=env.number("BOXOFFICE_QUEUE_BOOKING_ERROR_RATIO", 0.05, minimum=0.001, maximum=1.0),
            booking_health_max_age_seconds=env.number(
                "BOXOFFICE_QUEUE_BOOKING_HEALTH_MAX_AGE_SECONDS", 15.0, minimum=1.0, maximum=600.0
            ),
            booking_stock_max_age_seconds=env.number(
                "BOXOFFICE_QUEUE_BOOKING_STOCK_MAX_AGE_SECONDS", 15.0, minimum=1.0, maximum=600.0
            ),
            no_show_window_seconds=env.number(
                "BOXOFFICE_QUEUE_NO_SHOW_WINDOW_SECONDS", 120.0, minimum=1.0, maximum=3600.0
            ),
            draw_record_seconds=env.number("BOXOFFICE_QUEUE_DRAW_RECORD_SECONDS", 1.0, minimum=0.05, maximum=60.0),
            lifecycle_record_seconds=env.number(
                "BOXOFFICE_QUEUE_LIFECYCLE_RECORD_SECONDS", 1.0, minimum=0.05, maximum=60.0
            ),
            lifecycle_retention_days=env.integer(
                "BOXOFFICE_QUEUE_LIFECYCLE_RETENTION_DAYS", 90, minimum=1, maximum=3650
            ),
        )
