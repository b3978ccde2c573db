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
        )
