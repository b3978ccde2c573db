"""The booking service's Prometheus metrics (registered on the process's
registry, never a global one)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from boxoffice.metrics import LATENCY_BUCKETS


@dataclass(frozen=True)
class BookingMetrics:
    """Metrics of the BookingService server role."""

    holds: Counter
    hold_seconds: Histogram
    confirms: Counter
    gate: Counter
    seats: Gauge
    seat_gauges_omitted: Gauge
    waitlist: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> BookingMetrics:
        metrics = cls(
            holds=Counter(
                "boxoffice_booking_holds",
                "HoldSeats calls by result (held, replayed, or the error reason in lower case).",
                ("result",),
                registry=registry,
            ),
            hold_seconds=Histogram(
                "boxoffice_booking_hold_seconds",
                "Time to answer HoldSeats, token check to answer.",
                buckets=LATENCY_BUCKETS,
                registry=registry,
            ),
            confirms=Counter(
                "boxoffice_booking_confirms",
                "ConfirmHold calls by result (confirmed, or the error reason in lower case).",
                ("result",),
                registry=registry,
            ),
            gate=Counter(
                "boxoffice_booking_seat_gate",
                "Seat gate decisions: passed, rejected, or skipped (Redis failed; Postgres decided alone).",
                ("result",),
                registry=registry,
            ),
            seats=Gauge(
                "boxoffice_booking_seats",
                "Seats (or general-admission places) per section by state: available, held, sold.",
                ("event_id", "section_id", "state"),
                registry=registry,
            ),
            seat_gauges_omitted=Gauge(
                "boxoffice_booking_seat_gauge_sections_omitted",
                "Sections of events not yet started left without seat gauges"
                " (beyond BOXOFFICE_BOOKING_SEAT_GAUGE_SECTIONS, the latest events').",
                registry=registry,
            ),
            waitlist=Counter(
                "boxoffice_booking_waitlist_offers",
                "Waiting-list offers by outcome: offered (seats held for the next fan), taken (bought),"
                " lapsed (ran out or declined), passed_over (the fan may not buy more).",
                ("outcome",),
                registry=registry,
            ),
        )
        # The series dashboards read exist at zero from the start.
        for outcome in ("offered", "taken", "lapsed", "passed_over"):
            metrics.waitlist.labels(outcome)
        for result in ("held", "replayed", "error"):
            metrics.holds.labels(result)
        metrics.confirms.labels("confirmed")
        for result in ("passed", "rejected", "skipped"):
            metrics.gate.labels(result)
        return metrics


@dataclass(frozen=True)
class SweeperMetrics:
    """Metrics of the expiry sweeper role."""

    released_holds: Counter
    released_seats: Counter
    passes: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> SweeperMetrics:
        metrics = cls(
            released_holds=Counter(
                "boxoffice_booking_sweeper_released_holds",
                "Lapsed holds the sweeper moved to EXPIRED.",
                registry=registry,
            ),
            released_seats=Counter(
                "boxoffice_booking_sweeper_released_seats",
                "Seats the sweeper returned to sale.",
                registry=registry,
            ),
            passes=Counter(
                "boxoffice_booking_sweeper_passes",
                "Sweeper passes by result (ok, error).",
                ("result",),
                registry=registry,
            ),
        )
        # The series dashboards read exist at zero from the start.
        for result in ("ok", "error"):
            metrics.passes.labels(result)
        return metrics


@dataclass(frozen=True)
class RelayMetrics:
    published: Counter
    republished: Counter
    pending: Gauge
    lag_seconds: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> RelayMetrics:
        return cls(
            published=Counter("boxoffice_outbox_published", "Outbox rows published to the stream.", registry=registry),
            republished=Counter(
                "boxoffice_outbox_republished",
                "Outbox rows published again because the stream lost them.",
                registry=registry,
            ),
            pending=Gauge("boxoffice_outbox_pending", "Committed outbox rows not yet published.", registry=registry),
            lag_seconds=Gauge(
                "boxoffice_outbox_lag_seconds", "Age of the oldest unpublished outbox row.", registry=registry
            ),
        )
