"""What a stream consumer reports, registered under a prefix per group."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge


@dataclass(frozen=True)
class ConsumerMetrics:
    """One consumer group's progress on the stream."""

    processed: Counter
    failed: Counter
    rejected: Counter
    claimed: Counter
    pending: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry, prefix: str) -> ConsumerMetrics:
        return cls(
            processed=Counter(
                f"{prefix}_entries_processed", "Stream entries handled and acknowledged.", registry=registry
            ),
            failed=Counter(
                f"{prefix}_entries_failed", "Stream entries whose handling failed (retried).", registry=registry
            ),
            rejected=Counter(
                f"{prefix}_entries_rejected", "Malformed stream entries acknowledged unhandled.", registry=registry
            ),
            claimed=Counter(
                f"{prefix}_entries_claimed", "Stream entries claimed from an idle or dead consumer.", registry=registry
            ),
            pending=Gauge(
                f"{prefix}_pending_entries", "Entries delivered to the group and not acknowledged.", registry=registry
            ),
        )
