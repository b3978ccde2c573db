"""The monitoring component against what an SRE needs of it: alerts that
select boxoffice's own series only, per namespace, that fire when their
text says (promtool runs every alert's cases, a foreign service's among
them), each with a runbook section; a dashboard whose every query follows
its namespace and pod variables and Grafana's rate interval; and manifests
that apply to a cluster without the Prometheus Operator."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.k8s.support import (
    K8S,
    PGBOUNCER_EXPORTER_METRICS,
    built,
    documents,
    metric_names_exported,
    monitor_jobs,
    needs_kubectl,
    of_kind,
    promtool,
    yaml,
)

HERE = Path(__file__).parent
CASES = (HERE / "alerts.promtool.yaml", HERE / "edge_alerts.promtool.yaml", HERE / "door_alerts.promtool.yaml")
DASHBOARD = K8S / "components/monitoring/dashboards/boxoffice.json"
# The series every boxoffice target has besides the code's own metrics.
TARGET_SERIES = frozenset({"up"})
# Prometheus's aggregation operators: each must keep the namespace.
_AGGREGATIONS = ("sum", "max", "min", "avg", "count", "group", "topk", "bottomk", "stddev", "quantile")
_SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
_RANGE = re.compile(r"\b(rate|irate|increase|delta|deriv|[a-z]+_over_time)\((?:[^()\[\]]|\([^()]*\))*\[([^\]]+)\]")


def _alerts() -> dict[str, dict[str, Any]]:
    (rule,) = of_kind("PrometheusRule")
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def _metric_names(expression: str) -> set[str]:
    """The series names an expression reads (identifiers that are metric
    names of the code or of PgBouncer's exporter, or a target's own series)."""
    known = metric_names_exported() | PGBOUNCER_EXPORTER_METRICS | TARGET_SERIES
    return {name for name in re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", expression) if name in known}


def _cases() -> list[dict[str, Any]]:
    return [test for path in CASES for test in yaml.safe_load(path.read_text())["tests"]]


def _job_of(series: str) -> str | None:
    found = re.search(r'\bjob="([^"]*)"', series)
    return found.group(1) if found else None


def test_every_selector_of_every_alert_names_a_job_of_boxoffice() -> None:
    jobs = set(monitor_jobs().values())
    for name, alert in _alerts().items():
        expression = alert["expr"]
        # An absence alert may not stand on a constant: "or vector(0)"
        # fires in any Prometheus, boxoffice or not.
        assert "vector(" not in expression and "absent(" not in expression, name
        selected = dict(_SELECTOR.findall(expression))
        assert _metric_names(expression) == set(selected), (name, expression)
        for metric, matchers in selected.items():
            (job,) = re.findall(r'\bjob="([^"]+)"', matchers) or [None]
            assert job in jobs, (name, metric)
            if metric.startswith("grpc_server_"):
                # Boxoffice's own services: not the health service, nor a
                # foreign service's in the same job.
                assert r'grpc_service=~"boxoffice\\..+"' in matchers, (name, metric)


def test_every_alert_keeps_the_namespace() -> None:
    for name, alert in _alerts().items():
        expression = alert["expr"]
        operators = re.findall(rf"\b({'|'.join(_AGGREGATIONS)})\b\s*(by\s*\(([^)]*)\))?\s*\(", expression)
        assert operators, name
        for operator, _, labels in operators:
            assert "namespace" in [label.strip() for label in labels.split(",")], (name, operator)
        for joined in re.findall(r"\b(?:on|ignoring)\s*\(([^)]*)\)", expression):
            assert "namespace" in [label.strip() for label in joined.split(",")], name


def test_no_rule_or_panel_reads_the_admitters_duplicate_leadership_gauge() -> None:
    # boxoffice_leader_is_leader{name="admitter"} is the one gauge of it.
    text = (K8S / "components/monitoring/prometheusrule.yaml").read_text() + DASHBOARD.read_text()
    assert "boxoffice_queue_admitter_leading" not in text
    assert (
        'boxoffice_leader_is_leader{job="boxoffice",name="admitter"}'
        in _alerts()["BoxofficeAdmitterNotLeading"]["expr"]
    )


def test_every_alert_has_cases_that_fire_and_a_foreign_service_that_must_not_page() -> None:
    alerts = set(_alerts())
    fired = {c["alertname"] for test in _cases() for c in test["alert_rule_test"] if c.get("exp_alerts")}
    assert fired == alerts
    jobs = set(monitor_jobs().values())
    read = set().union(*(_metric_names(alert["expr"]) for alert in _alerts().values()))
    foreign_only = [test for test in _cases() if all(_job_of(s["series"]) not in jobs for s in test["input_series"])]
    (foreign,) = foreign_only
    # Every name the rules read, at values that would page boxoffice.
    names = {re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s["series"]).group(0) for s in foreign["input_series"]}  # type: ignore[union-attr]
    assert read <= names
    assert {c["alertname"] for c in foreign["alert_rule_test"] if c["exp_alerts"] == []} == alerts


def test_promtool_accepts_the_rules_and_every_alert_fires_where_and_when_its_text_says(tmp_path: Path) -> None:
    command = promtool()
    (rule,) = of_kind("PrometheusRule")
    (tmp_path / "rules.yaml").write_text(json.dumps(rule["spec"]))  # JSON is YAML
    for case in CASES:
        (tmp_path / case.name).write_text(case.read_text())
    for arguments in (["check", "rules", "rules.yaml"], ["test", "rules", *(case.name for case in CASES)]):
        result = subprocess.run(
            [command, *arguments], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_sweepers_alert_says_the_time_it_fires_after() -> None:
    # No completed pass in the window, for the alert's "for": the text's
    # minutes are the two together (promtool checks the firing time).
    alert = _alerts()["BoxofficeSweeperStalled"]
    (window,) = re.findall(r"\[(\d+)m\]", alert["expr"])
    waited = int(window) + int(alert["for"].removesuffix("m"))
    assert f"for {waited} minutes" in alert["annotations"]["summary"]
    assert f"in {waited} minutes" in alert["annotations"]["description"]


def test_pgbouncers_waiting_clients_alert_after_a_minute() -> None:
    alert = _alerts()["BoxofficePgbouncerClientsWaiting"]
    assert 'pgbouncer_pools_client_waiting_connections{job="boxoffice-pgbouncer"}' in alert["expr"]
    assert alert["expr"].rstrip().endswith("> 0") and alert["for"] == "1m"
    assert "boxoffice-pgbouncer" in monitor_jobs().values()


def _dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def _panels() -> list[dict[str, Any]]:
    return [panel for panel in _dashboard()["panels"] if panel["type"] != "row"]


def test_the_dashboard_has_namespace_and_pod_variables_from_boxoffices_jobs() -> None:
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    jobs = "|".join(sorted(set(monitor_jobs().values())))
    namespace, pod = variables["namespace"], variables["pod"]
    for variable in (namespace, pod):
        assert variable["type"] == "query" and variable["datasource"]["uid"] == "${datasource}"
        assert variable["query"]["query"] == variable["definition"]
        assert f'job=~"{jobs}"' in variable["definition"], variable["name"]
    assert namespace["definition"].startswith("label_values(up{") and namespace["definition"].endswith(", namespace)")
    # The pods of the chosen namespace, all of them unless some are picked.
    assert 'namespace="$namespace"' in pod["definition"] and pod["definition"].endswith(", pod)")
    assert pod["multi"] is True and pod["includeAll"] is True and pod["allValue"] == ".*"
    order = [v["name"] for v in _dashboard()["templating"]["list"]]
    assert order.index("datasource") < order.index("namespace") < order.index("pod")


def test_every_panel_follows_the_variables_and_grafanas_rate_interval() -> None:
    jobs = set(monitor_jobs().values())
    for panel in _panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expression = target["expr"]
            selectors = _SELECTOR.findall(expression)
            assert selectors and {m for m, _ in selectors} == _metric_names(expression), (panel["title"], expression)
            for metric, matchers in selectors:
                assert 'namespace="$namespace"' in matchers, (panel["title"], metric)
                assert 'pod=~"$pod"' in matchers, (panel["title"], metric)
                (job,) = re.findall(r'\bjob="([^"]+)"', matchers)
                assert job in jobs and (job == "boxoffice-edge") == metric.startswith("boxoffice_edge_"), metric
            ranges = _RANGE.findall(expression)
            assert len(ranges) == expression.count("["), (panel["title"], expression)
            assert {interval for _, interval in ranges} <= {"$__rate_interval"}, (panel["title"], expression)


def test_the_dashboard_is_grafana_json_it_can_import() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "boxoffice" and isinstance(dashboard["schemaVersion"], int)
    assert dashboard["schemaVersion"] >= 36  # datasource variables by uid, panels with fieldConfig
    for panel in dashboard["panels"]:
        assert isinstance(panel["id"], int) and panel["type"] in ("row", "timeseries", "stat", "table"), panel
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}
        for target in panel.get("targets", []):
            assert re.fullmatch(r"[A-Z]", target["refId"]), panel["title"]
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), panel["title"]
        for override in panel.get("fieldConfig", {}).get("overrides", []):
            if override["matcher"]["id"] == "byFrameRefID":
                assert override["matcher"]["options"] in refs, panel["title"]


def _operator_kinds(objects: list[dict[str, Any]]) -> list[str]:
    return [o["kind"] for o in objects if o["apiVersion"].startswith("monitoring.coreos.com/")]


def test_monitoring_objects_carry_the_release_label_kube_prometheus_stack_selects() -> None:
    for obj in [*of_kind("PodMonitor"), *of_kind("PrometheusRule")]:
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack", obj["metadata"]["name"]
    readme = (K8S / "README.md").read_text()
    assert "release: kube-prometheus-stack" in readme and "ruleSelectorNilUsesHelmValues" in readme


def test_the_monitoring_component_is_opt_in() -> None:
    (default,) = documents(K8S / "kustomization.yaml")
    assert not [c for c in default.get("components", []) if "monitoring" in c]
    (istio,) = documents(K8S / "overlays/istio/kustomization.yaml")
    assert not [c for c in istio.get("components", []) if "monitoring" in c]
    (monitoring,) = documents(K8S / "overlays/monitoring/kustomization.yaml")
    assert monitoring["resources"] == ["../../base"]
    # The default's components, then monitoring.
    assert monitoring["components"] == [f"../../{c}" for c in default["components"]] + ["../../components/monitoring"]


@needs_kubectl
def test_the_default_and_istio_apply_without_the_prometheus_operator_and_the_overlay_adds_it() -> None:
    assert _operator_kinds(built(K8S)) == []
    assert _operator_kinds(built(K8S / "overlays/istio")) == []
    with_monitoring = built(K8S / "overlays/monitoring")
    assert sorted(_operator_kinds(with_monitoring)) == ["PodMonitor", "PodMonitor", "PodMonitor", "PrometheusRule"]
    dashboards = [o for o in with_monitoring if o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    assert [o["kind"] for o in dashboards] == ["ConfigMap"]
    # The overlay is the default plus monitoring, nothing else changed.
    plain = {(o["kind"], o["metadata"]["name"]) for o in built(K8S)}
    assert plain <= {(o["kind"], o["metadata"]["name"]) for o in with_monitoring}


def test_promtool_parses_every_query_of_the_dashboard(tmp_path: Path) -> None:
    command = promtool()
    # Grafana's variables as Grafana fills them in, then each query as a
    # recording rule: promtool checks its PromQL.
    filled = {"$__rate_interval": "1m", "$namespace": "boxoffice", "$pod": ".*"}
    rules = []
    for panel in _panels():
        for target in panel["targets"]:
            expression = target["expr"]
            for variable, value in filled.items():
                expression = expression.replace(variable, value)
            assert "$" not in expression, (panel["title"], expression)
            rules.append({"record": f"dashboard:panel_{panel['id']}_{target['refId']}", "expr": expression})
    (tmp_path / "dashboard.yaml").write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [command, "check", "rules", "dashboard.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
