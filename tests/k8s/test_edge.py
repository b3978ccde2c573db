"""The edge in the manifests, checked against the edge's code: its command
and settings, HTTP probes on its one port, a drain inside its grace period,
an Ingress that routes the public routes of ``edge_svc.routes`` and none of
the operations routes, and its panels and alerts (scoped to boxoffice's own
jobs, each alert with a runbook section that exists)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from boxoffice.config import Env
from boxoffice_cli import main as cli
from edge_svc.config import EdgeConfig
from edge_svc.routes import ROUTES, Who
from queue_svc import model as queue_model
from tests.k8s.support import (
    EDGE_METRICS,
    K8S,
    ROOT,
    built,
    by_name,
    config_map_data,
    env_names_read,
    kustomization_roots,
    metric_names_exported,
    metrics_in,
    monitor_jobs,
    needs_kubectl,
    of_kind,
)

EDGE, EDGE_PORT = "edge", 8080
DASHBOARD = K8S / "components/monitoring/dashboards/boxoffice.json"
RULES = K8S / "components/monitoring/prometheusrule.yaml"
REPOSITORY = "https://github.com/boxoffice/boxoffice/blob/main/"
EDGE_JOB = "boxoffice-edge"
OPERATIONS = {route.path for route in ROUTES if route.who is Who.OPERATIONS}
# What the edge is told, as issue 9 names its settings.
SETTINGS = {
    "BOXOFFICE_EDGE_HOST",
    "BOXOFFICE_EDGE_PORT",
    "BOXOFFICE_QUEUE_ADDR",
    "BOXOFFICE_BOOKING_ADDR",
    "BOXOFFICE_PAYMENT_ADDR",
    "REDIS_URL",
    "BOXOFFICE_EDGE_SESSION_KEYS_FILE",
    "BOXOFFICE_OIDC_ISSUER",
    "BOXOFFICE_OIDC_AUDIENCE",
    "BOXOFFICE_OIDC_JWKS_FILE",
    "BOXOFFICE_EDGE_TRUSTED_PROXIES",
    "BOXOFFICE_EDGE_ORIGINS",
    "BOXOFFICE_EDGE_DEV_SIGNIN",
    "BOXOFFICE_EDGE_DRAIN_SECONDS",
    # Issue 11: presence reports to the waiting room, and the bot defence.
    "BOXOFFICE_EDGE_PRESENCE_REPORT_SECONDS",
    "BOXOFFICE_EDGE_CHALLENGE",
    "BOXOFFICE_EDGE_POW_BITS",
}


def _pod() -> dict[str, Any]:
    return dict(by_name("Deployment")[EDGE]["spec"]["template"]["spec"])


def _container() -> dict[str, Any]:
    (container,) = _pod()["containers"]
    return dict(container)


def _settings() -> dict[str, str]:
    """The edge's environment: both ConfigMaps, then its own variables."""
    container = _container()
    settings: dict[str, str] = {}
    for source in container["envFrom"]:
        settings.update(config_map_data(source["configMapRef"]["name"]))
    for variable in container["env"]:
        settings[variable["name"]] = variable.get("value", "<from elsewhere>")
    return settings


def test_the_edge_runs_boxoffice_edge() -> None:
    assert _container()["args"] == [EDGE]
    assert EDGE in cli.commands(cli.service_modules())


def test_the_edge_gets_every_setting_it_needs_and_only_ones_it_reads() -> None:
    settings = _settings()
    assert SETTINGS <= set(settings)
    assert settings["BOXOFFICE_EDGE_HOST"] == "0.0.0.0"
    assert int(settings["BOXOFFICE_EDGE_PORT"]) == EDGE_PORT
    # Development sign-in turns a name into a session: never in a cluster.
    assert Env({"X": settings["BOXOFFICE_EDGE_DEV_SIGNIN"]}).flag("X", True) is False
    assert settings["BOXOFFICE_OIDC_ISSUER"].startswith("https://")
    assert all(origin.startswith("https://") for origin in settings["BOXOFFICE_EDGE_ORIGINS"].split(","))
    own = set(config_map_data("boxoffice-edge-config")) | {e["name"] for e in _container()["env"]}
    assert own - env_names_read() == set()


def _edge_config(tmp_path: Path, **changes: str) -> EdgeConfig:
    """The edge's settings as the manifests give them (its mounted files
    replaced by local ones), parsed as the edge parses them at start."""
    keys, jwks = tmp_path / "keys", tmp_path / "jwks.json"
    keys.write_text("k1:" + "x" * 43 + "\n")
    jwks.write_text('{"keys": []}')
    settings = {
        **_settings(),
        "BOXOFFICE_EDGE_SESSION_KEYS_FILE": str(keys),
        "BOXOFFICE_OIDC_JWKS_FILE": str(jwks),
        **changes,
    }
    return EdgeConfig.from_env(Env(settings))


def test_the_bot_defence_is_off_by_default_and_ready_to_switch_on(tmp_path: Path) -> None:
    config = _edge_config(tmp_path)
    assert config.challenge.kind == "none"
    # Switching it on is one setting: the difficulty is already there.
    proof = _edge_config(tmp_path, BOXOFFICE_EDGE_CHALLENGE="proof-of-work")
    assert proof.challenge.kind == "proof-of-work" and proof.challenge.pow_bits == 18
    per_event = _edge_config(tmp_path, BOXOFFICE_EDGE_POW_BITS_BY_EVENT="42:20,43:0")
    assert per_event.challenge.pow_bits_by_event == ((42, 20), (43, 0))
    # The external service's URL and secret are not in the ConfigMap: set on
    # the Deployment when it is used (README.md of k8s, "Bot defence").
    assert not {"BOXOFFICE_EDGE_CHALLENGE_URL", "BOXOFFICE_EDGE_CHALLENGE_SECRET"} & set(_settings())


def test_the_edge_reports_fans_present_well_within_the_presence_grace(tmp_path: Path) -> None:
    config = _edge_config(tmp_path)
    assert config.presence_report_seconds * 3 <= queue_model.DEFAULT_PRESENCE_GRACE_MS / 1000


def test_the_edge_mounts_its_session_keys_and_the_identity_providers_keys_where_the_settings_say() -> None:
    pod, container, settings = _pod(), _container(), _settings()
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for variable, kind, source in (
        ("BOXOFFICE_EDGE_SESSION_KEYS_FILE", "secret", "boxoffice-edge-session-keys"),
        ("BOXOFFICE_OIDC_JWKS_FILE", "configMap", "boxoffice-oidc-jwks"),
    ):
        path = Path(settings[variable])
        (name,) = [n for n, m in mounts.items() if Path(m["mountPath"]) == path.parent]
        # A whole volume (no subPath): the kubelet replaces the file when the
        # keys rotate, and the edge re-reads it.
        assert mounts[name].get("readOnly") is True and "subPath" not in mounts[name]
        volume = volumes[name][kind]
        assert volume.get("secretName", volume.get("name")) == source
        assert [item["path"] for item in volume["items"]] == [path.name]
    assert volumes["session-keys"]["secret"]["defaultMode"] == 0o440
    assert "BOXOFFICE_EDGE_SESSION_KEYS" not in settings  # the keys never sit in a variable


def test_the_edge_is_probed_over_http_on_its_named_port_and_drains_inside_its_grace() -> None:
    pod, container, settings = _pod(), _container(), _settings()
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": EDGE_PORT}
    paths = {route.name: route.path for route in ROUTES}
    expected = {
        "startupProbe": paths["GetHealth"],
        "livenessProbe": paths["GetHealth"],
        "readinessProbe": paths["GetReadiness"],
    }
    for probe, path in expected.items():
        assert set(container[probe]) & {"grpc", "tcpSocket", "exec"} == set(), probe
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}, probe
    # The edge drains itself: /readyz fails for the drain, then the listener
    # closes and in-flight requests get the shutdown grace. No preStop sleep
    # in front of it, and the kubelet waits for all of it (plus the streams'
    # last events).
    assert "lifecycle" not in container
    drain = float(settings["BOXOFFICE_EDGE_DRAIN_SECONDS"])
    grace = float(settings["BOXOFFICE_SHUTDOWN_GRACE_SECONDS"])
    assert pod["terminationGracePeriodSeconds"] >= drain + grace + 5
    # A draining pod is out of the endpoints before the listener closes.
    readiness = container["readinessProbe"]
    assert readiness["periodSeconds"] * readiness["failureThreshold"] < drain


def _ingress() -> dict[str, Any]:
    (ingress,) = of_kind("Ingress")
    return dict(ingress)


def _ingress_paths() -> list[dict[str, Any]]:
    (rule,) = _ingress()["spec"]["rules"]
    return list(rule["http"]["paths"])


def _routed(path: str) -> bool:
    """Whether a request for ``path`` matches one of the Ingress's paths
    (Exact: the same string; Prefix: element by element, as Kubernetes
    defines it)."""
    elements = [e for e in path.split("/") if e]
    for entry in _ingress_paths():
        if entry["pathType"] == "Exact" and entry["path"] == path:
            return True
        if entry["pathType"] == "Prefix":
            prefix = [e for e in entry["path"].split("/") if e]
            if elements[: len(prefix)] == prefix:
                return True
    return False


def test_the_ingress_routes_the_public_routes_to_the_edge_and_no_operations_route() -> None:
    for entry in _ingress_paths():
        assert entry["pathType"] in ("Exact", "Prefix"), entry  # no controller-specific matching
        assert entry["backend"] == {"service": {"name": EDGE, "port": {"name": "http"}}}
    for route in ROUTES:
        path = re.sub(r"\{[a-z_]+\}", "42", route.path)
        assert _routed(path) == (route.who is not Who.OPERATIONS), route.path
    assert {"/healthz", "/readyz", "/metrics"} <= OPERATIONS
    for path in (*OPERATIONS, "/metrics/", "/readyz/x", "/v1x", "/events"):
        assert not _routed(path), path
    # The fan's pages.
    for path in ("/", "/e/42", "/gate", "/assets/app.js", "/openapi.json"):
        assert _routed(path), path
    assert _ingress()["spec"]["ingressClassName"]


def test_the_ingress_streams_server_sent_events() -> None:
    annotations = _ingress()["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    # Far longer than the edge's heartbeats (15 s by default), so a quiet
    # stream is never cut by the controller.
    for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
        assert int(annotations[f"nginx.ingress.kubernetes.io/{timeout}"]) >= 300, timeout
    assert any(route.sse for route in ROUTES if _routed(route.path.replace("{event_id}", "1")))


@needs_kubectl
def test_with_istio_the_public_port_is_plaintext_to_the_edge() -> None:
    (istio,) = [root for root in kustomization_roots() if root.name == "istio"]
    (rule,) = [o for o in built(istio) if o["kind"] == "DestinationRule"]
    assert rule["spec"]["host"] == EDGE
    (setting,) = rule["spec"]["trafficPolicy"]["portLevelSettings"]
    assert setting == {"port": {"number": EDGE_PORT}, "tls": {"mode": "DISABLE"}}


def _edge_panels() -> list[dict[str, Any]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        panel
        for panel in dashboard["panels"]
        if any("boxoffice_edge_" in target["expr"] for target in panel.get("targets", []))
    ]


def _operations_excluded(query: str) -> set[str]:
    found = re.findall(r'route!~"([^"]*)"', query)
    return set().union(*(set(f.split("|")) for f in found)) if found else set()


def test_the_dashboard_shows_the_edge_in_its_namespace_one_unit_a_panel() -> None:
    panels = _edge_panels()
    queries = [target["expr"] for panel in panels for target in panel["targets"]]
    for panel in panels:
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        for override in panel["fieldConfig"]["overrides"]:
            assert not [p for p in override["properties"] if p["id"] == "unit"], panel["title"]
    for query in queries:
        assert f'job="{EDGE_JOB}"' in query and 'namespace="$namespace"' in query, query
        ranges = re.findall(r"\(\w+\{[^}]*\}\[([^\]]+)\]\)", query)
        assert "[" not in query or ranges, query
        assert set(ranges) <= {"$__rate_interval"}, query
        excluded = _operations_excluded(query)
        assert excluded in (set(), OPERATIONS), query
    joined = " ".join(queries)
    for metric in (
        "boxoffice_edge_http_requests_total",
        "boxoffice_edge_sse_connections",
        "boxoffice_edge_progress_streams",
        "boxoffice_edge_rate_limited_total",
    ):
        assert metric in joined, metric
    assert re.search(r'sum by \(route\) \(rate\(boxoffice_edge_http_requests_total\{[^}]*code=~"5\.\."', joined)
    assert re.search(
        r"histogram_quantile\(0\.99, sum by \(route, le\) \(rate\(boxoffice_edge_http_request_duration", joined
    )
    assert re.search(r"sum by \(route\) \(rate\(boxoffice_edge_http_requests_total\{", joined)


def _alerts() -> dict[str, tuple[str, dict[str, Any]]]:
    (rule,) = of_kind("PrometheusRule")
    return {r["alert"]: (group["name"], r) for group in rule["spec"]["groups"] for r in group["rules"]}


def test_the_edge_alerts_on_errors_latency_and_fans_waiting_blind() -> None:
    alerts = _alerts()
    edge = {name: alert for name, (group, alert) in alerts.items() if group == "boxoffice.edge"}
    assert set(edge) == {"BoxofficeEdgeErrorRatioHigh", "BoxofficeEdgeLatencyHigh", "BoxofficeEdgeFansWaitingBlind"}
    errors = edge["BoxofficeEdgeErrorRatioHigh"]["expr"]
    assert 'code=~"5.."' in errors and _operations_excluded(errors) == OPERATIONS
    latency = edge["BoxofficeEdgeLatencyHigh"]["expr"]
    assert "histogram_quantile(0.99" in latency and _operations_excluded(latency) == OPERATIONS
    assert metrics_in(edge["BoxofficeEdgeFansWaitingBlind"]["expr"]) == {
        "boxoffice_edge_sse_connections",
        "boxoffice_edge_progress_streams",
    }
    for name, alert in edge.items():
        assert alert.get("for"), name  # a moment of it is not an alert
        assert "runbook_url" in alert["annotations"], name


def test_every_alert_selects_boxoffices_own_jobs_only() -> None:
    jobs = set(monitor_jobs().values())
    for name, (_, alert) in _alerts().items():
        expression = alert["expr"]
        for metric in metrics_in(expression):
            for match in re.finditer(rf"\b{metric}\b(\{{[^}}]*\}})?", expression):
                selector = match.group(1) or ""
                (job,) = re.findall(r'\bjob="([^"]+)"', selector) or [None]
                assert job in jobs, (name, match.group(0))
                assert (job == EDGE_JOB) == metric.startswith("boxoffice_edge_"), (name, metric)


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    anchors = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", markdown, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_every_runbook_url_is_a_section_of_a_runbook_in_the_repository() -> None:
    linked = 0
    for name, (_, alert) in _alerts().items():
        url = alert["annotations"].get("runbook_url")
        assert url is not None, name
        assert url.startswith(REPOSITORY), (name, url)
        parts = urlsplit(url)
        path = ROOT / url.removeprefix(REPOSITORY).split("#")[0]
        assert path.is_file() and path.is_relative_to(ROOT / "docs/runbooks"), (name, url)
        assert parts.fragment in _anchors(path.read_text()), (name, url)
        linked += 1
    assert linked == len(_alerts()) >= 10


def test_the_edge_exports_what_its_panels_and_alerts_read() -> None:
    exported = metric_names_exported()
    assert EDGE_METRICS <= exported
    queries = [target["expr"] for panel in _edge_panels() for target in panel["targets"]]
    queries += [alert["expr"] for _, alert in _alerts().values()]
    used = {m for q in queries for m in metrics_in(q) if m.startswith("boxoffice_edge_")}
    assert used and used <= exported
