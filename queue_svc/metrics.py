"""The queue's Prometheus metrics, registered on the process's registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from boxoffice.metrics import LATENCY_BUCKETS

# "safety_net": joined and admitted at once (safety-net mode).
JOIN_RESULTS = ("joined", "rejoined", "admitted", "safety_net", "rate_limited", "not_open", "unknown_event")


@dataclass(frozen=True)
class ServerMetrics:
    """What a QueueService process counts."""

    joins: Counter
    watchers_open: Gauge
    sessions_ended: Counter
    tokens_issued: Counter
    progress_reads: Counter
    presence_reports: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> ServerMetrics:
        metrics = cls(
            joins=Counter("boxoffice_queue_joins", "JoinQueue calls by result.", ("result",), registry=registry),
            watchers_open=Gauge(
                "boxoffice_queue_watchers_open",
                "Open watch streams in this process, by stream kind.",
                ("stream",),
                registry=registry,
            ),
            sessions_ended=Counter(
                "boxoffice_queue_sessions_ended",
                "Shopping sessions ended by the fan, by reason.",
                ("reason",),
                registry=registry,
            ),
            tokens_issued=Counter("boxoffice_queue_tokens_issued", "Access tokens issued.", registry=registry),
            progress_reads=Counter(
                "boxoffice_queue_progress_reads",
                "Reads of an event's progress made for this process's watchers.",
                registry=registry,
            ),
            presence_reports=Counter(
                "boxoffice_queue_presence_reports",
                "Reports that this process's watchers are present: one call per event and interval for all of them.",
                registry=registry,
            ),
        )
        for result in JOIN_RESULTS:
            metrics.joins.labels(result)
        for stream in ("position", "progress"):
            metrics.watchers_open.labels(stream)
        return metrics


@dataclass(frozen=True)
class AdmitterMetrics:
    """What the admitter measures, per event where it matters."""

    queue_length: Gauge
    active_shoppers: Gauge
    admitted: Counter
    expired: Counter
    tick_seconds: Histogram
    stale_ticks: Counter
    dropped: Counter
    no_shows: Counter
    target_rate: Gauge
    rate_reason: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> AdmitterMetrics:
        return cls(
            queue_length=Gauge(
                "boxoffice_queue_length", "Fans waiting in the queue.", ("event_id",), registry=registry
            ),
            active_shoppers=Gauge(
                "boxoffice_queue_active_shoppers",
                "Fans admitted and shopping (claimed or not yet).",
                ("event_id",),
                registry=registry,
            ),
            admitted=Counter(
                "boxoffice_queue_admitted", "Fans admitted by this admitter.", ("event_id",), registry=registry
            ),
            expired=Counter(
                "boxoffice_queue_expired",
                "Sessions and unclaimed admissions dropped by this admitter.",
                ("event_id",),
                registry=registry,
            ),
            tick_seconds=Histogram(
                "boxoffice_queue_admit_tick_seconds",
                "Time of one admit tick of one event, round trip included.",
                buckets=LATENCY_BUCKETS,
                registry=registry,
            ),
            stale_ticks=Counter(
                "boxoffice_queue_admit_stale_epoch",
                "Admit ticks refused because a newer leader has written.",
                registry=registry,
            ),
            dropped=Counter(
                "boxoffice_queue_dropped",
                "Waiting fans dropped by this admitter for not being seen within the presence grace.",
                ("event_id",),
                registry=registry,
            ),
            no_shows=Counter(
                "boxoffice_queue_no_shows",
                "Admissions that expired unclaimed (no-shows), as this admitter saw the event's count grow.",
                ("event_id",),
                registry=registry,
            ),
            target_rate=Gauge(
                "boxoffice_queue_admission_rate_target",
                "Admissions per second the admitter targets (the base rate adapted within the room's bounds).",
                ("event_id",),
                registry=registry,
            ),
            rate_reason=Gauge(
                "boxoffice_queue_admission_rate_reason",
                "1 for the reason the admitter targets its current rate, 0 for the others.",
                ("event_id", "reason"),
                registry=registry,
            ),
        )


@dataclass(frozen=True)
class DrawMetrics:
    """What the draw recorder does: placements copied to Postgres, draws
    sealed (their seed revealed), passes that failed."""

    recorded: Counter
    sealed: Counter
    failures: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> DrawMetrics:
        return cls(
            recorded=Counter(
                "boxoffice_queue_draw_placements_recorded",
                "Pre-queue placements this process copied from the Redis log to Postgres (a copy another"
                " process made too counts in both).",
                registry=registry,
            ),
            sealed=Counter(
                "boxoffice_queue_draws_sealed",
                "Pre-queue draws this process sealed at opening (their seed and participants public from then on).",
                registry=registry,
            ),
            failures=Counter(
                "boxoffice_queue_draw_record_failures",
                "Draws the recorder could not copy or seal in a pass (tried again at the next).",
                registry=registry,
            ),
        )


# A rebuild reads a room's whole history: seconds to minutes at scale.
_REBUILD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class RebuildMetrics:
    """The admitter's rebuilds of waiting rooms after Redis lost their data
    (``queue_svc.rebuild``): how many, how long each took, how many fans
    each put back (waiting, admitted, shopping, and flagged whom admission reached)."""

    rebuilds: Counter
    seconds: Histogram
    fans_restored: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> RebuildMetrics:
        return cls(
            rebuilds=Counter(
                "boxoffice_queue_rebuilds",
                "Waiting rooms rebuilt from Postgres after Redis lost their data.",
                registry=registry,
            ),
            seconds=Histogram(
                "boxoffice_queue_rebuild_seconds",
                "Time of one waiting room's rebuild: its history read and folded, Redis written.",
                buckets=_REBUILD_BUCKETS,
                registry=registry,
            ),
            fans_restored=Counter(
                "boxoffice_queue_rebuild_fans_restored",
                "Fans put back by rebuilds: waiting, admitted, shopping, and flagged whom admission reached.",
                registry=registry,
            ),
        )
