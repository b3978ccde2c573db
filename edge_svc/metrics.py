"""The edge's Prometheus metrics: HTTP RED per route, Server-Sent Events,
the admission-progress streams it holds, limits and upstream errors."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from boxoffice.metrics import LATENCY_BUCKETS
from edge_svc.routes import ROUTES


@dataclass(frozen=True)
class EdgeMetrics:
    requests: Counter
    duration: Histogram
    in_flight: Gauge
    sse_connections: Gauge
    progress_streams: Gauge
    progress_updates: Counter
    rate_limited: Counter
    rate_limit_unavailable: Counter
    upstream_errors: Counter
    admissions_fetched: Counter
    catalogue_loads: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> EdgeMetrics:
        metrics = cls(
            requests=Counter(
                "boxoffice_edge_http_requests",
                "HTTP requests answered, by method, route template and status code.",
                ["method", "route", "code"],
                registry=registry,
            ),
            duration=Histogram(
                "boxoffice_edge_http_request_duration_seconds",
                "Time to answer an HTTP request (to the response's start for streams), by route.",
                ["method", "route"],
                buckets=LATENCY_BUCKETS,
                registry=registry,
            ),
            in_flight=Gauge(
                "boxoffice_edge_http_requests_in_flight", "HTTP requests being answered now.", registry=registry
            ),
            sse_connections=Gauge(
                "boxoffice_edge_sse_connections", "Server-Sent Event streams open to fans now.", registry=registry
            ),
            progress_streams=Gauge(
                "boxoffice_edge_progress_streams",
                "WatchAdmissionProgress streams this process holds to QueueService (one per watched event).",
                registry=registry,
            ),
            progress_updates=Counter(
                "boxoffice_edge_progress_updates",
                "Admission-progress snapshots received from QueueService.",
                registry=registry,
            ),
            rate_limited=Counter(
                "boxoffice_edge_rate_limited",
                "Requests refused by a rate limit, by scope (ip, account, device, webhook).",
                ["scope"],
                registry=registry,
            ),
            rate_limit_unavailable=Counter(
                "boxoffice_edge_rate_limit_unavailable",
                "Rate-limit checks Redis could not answer (the request was let in).",
                registry=registry,
            ),
            upstream_errors=Counter(
                "boxoffice_edge_upstream_errors",
                "Calls to the services that failed, by service and canonical code.",
                ["service", "code"],
                registry=registry,
            ),
            admissions_fetched=Counter(
                "boxoffice_edge_admissions_fetched",
                "Access tokens fetched from QueueService for fans the progress showed admitted.",
                registry=registry,
            ),
            catalogue_loads=Counter(
                "boxoffice_edge_catalogue_loads",
                "Catalogue answers loaded from BookingService (the rest came from the edge's cache).",
                registry=registry,
            ),
        )
        # Every series exists from the start, so that dashboards and rate()
        # see zeros rather than nothing.
        for route in ROUTES:
            metrics.duration.labels(route.method, route.path)
        for scope in ("ip", "account"):
            metrics.rate_limited.labels(scope)
        return metrics
