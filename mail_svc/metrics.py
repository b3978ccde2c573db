"""The mailer's metrics. No address, name or language is ever a label."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from boxoffice.streams import ConsumerMetrics
from mail_svc.model import Kind

LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
OUTCOMES = ("sent", "failed", "no_address", "retried")


@dataclass(frozen=True)
class MailMetrics:
    # Deliveries by kind and outcome (retried: the relay said "try later").
    messages: Counter
    # From the booking's outbox row to its message handed to the relay.
    lag_seconds: Histogram
    consumer: ConsumerMetrics

    @classmethod
    def create(cls, registry: CollectorRegistry) -> MailMetrics:
        metrics = cls(
            messages=Counter(
                "boxoffice_mail_messages",
                "Messages by kind and outcome (sent, failed for good, no address, retried later).",
                ("kind", "outcome"),
                registry=registry,
            ),
            lag_seconds=Histogram(
                "boxoffice_mail_lag_seconds",
                "From the booking's outbox row to its message handed to the relay.",
                buckets=LAG_BUCKETS,
                registry=registry,
            ),
            consumer=ConsumerMetrics.create(registry, "boxoffice_mailer"),
        )
        for kind in Kind:
            for outcome in OUTCOMES:
                metrics.messages.labels(kind=kind.value, outcome=outcome)
        return metrics
