"""The payment processes' metrics, each set registered once per process role
on the registry it is given."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from boxoffice.streams import ConsumerMetrics
from payment_svc.model import PaymentState, RefundSource

LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


# What payment_svc.webhooks refuses a delivery for, and the event types the
# handler applies: their series exist at zero from the start.
_VERIFICATION_FAILURES = (
    "WEBHOOK_SIGNATURE_MISSING",
    "WEBHOOK_SIGNATURE_MALFORMED",
    "WEBHOOK_SIGNATURE_INVALID",
    "WEBHOOK_STALE",
)
_WEBHOOK_TYPES = ("charge.succeeded", "charge.failed", "charge.refunded", "refund.failed")


def state_label(state: PaymentState) -> str:
    """A payment state as the ``state`` label says it: in lower case, as
    every ``state`` label of the mesh is."""
    return state.value.lower()


@dataclass(frozen=True)
class ServerMetrics:
    payments_entered: Counter
    payments: Gauge
    refunds: Counter
    webhook_verification_failures: Counter
    webhooks: Counter
    webhooks_refused: Counter
    cancellations: ConsumerMetrics

    @classmethod
    def create(cls, registry: CollectorRegistry) -> ServerMetrics:
        metrics = cls(
            payments_entered=Counter(
                "boxoffice_payment_state_entered", "Payments that entered each state.", ("state",), registry=registry
            ),
            payments=Gauge(
                "boxoffice_payments", "Payments by state (refreshed by the reconciler).", ("state",), registry=registry
            ),
            refunds=Counter(
                "boxoffice_refunds",
                "Refunds finished, by source and outcome.",
                ("source", "outcome"),
                registry=registry,
            ),
            webhook_verification_failures=Counter(
                "boxoffice_webhook_verification_failures",
                "Webhook deliveries refused for their signature or age.",
                ("reason",),
                registry=registry,
            ),
            webhooks=Counter(
                "boxoffice_webhooks",
                "Webhook deliveries accepted, by type and outcome.",
                ("type", "outcome"),
                registry=registry,
            ),
            webhooks_refused=Counter(
                "boxoffice_webhooks_refused",
                "Verified webhook deliveries refused for what they say (an amount or currency not the payment's).",
                ("type", "reason"),
                registry=registry,
            ),
            cancellations=ConsumerMetrics.create(registry, "boxoffice_cancellation_consumer"),
        )
        # The series dashboards read exist at zero from the start.
        for state in PaymentState:
            metrics.payments_entered.labels(state_label(state))
        for source in RefundSource:
            for outcome in ("succeeded", "failed"):
                metrics.refunds.labels(source.value, outcome)
        for reason in _VERIFICATION_FAILURES:
            metrics.webhook_verification_failures.labels(reason)
        for event_type in _WEBHOOK_TYPES:
            for outcome in ("applied", "duplicate"):
                metrics.webhooks.labels(event_type, outcome)
        return metrics


@dataclass(frozen=True)
class IssuerMetrics:
    tickets_issued: Counter
    conflicts: Counter
    lag_seconds: Histogram
    consumer: ConsumerMetrics

    @classmethod
    def create(cls, registry: CollectorRegistry) -> IssuerMetrics:
        return cls(
            tickets_issued=Counter("boxoffice_tickets_issued", "Tickets issued.", registry=registry),
            conflicts=Counter(
                "boxoffice_ticket_conflicts",
                "Bookings whose seat already had a valid ticket (left pending and retried).",
                registry=registry,
            ),
            lag_seconds=Histogram(
                "boxoffice_issuer_lag_seconds",
                "From the outbox row's commit to its tickets' commit.",
                buckets=LAG_BUCKETS,
                registry=registry,
            ),
            consumer=ConsumerMetrics.create(registry, "boxoffice_issuer"),
        )
