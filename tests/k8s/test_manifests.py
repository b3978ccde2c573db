"""The Kubernetes manifests, read as YAML and checked against the code: no
cluster runs here, so what can be known without one is checked here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from boxoffice.config import Env, ServerConfig
from boxoffice.leader import lease_name
from boxoffice_cli import main as cli
from queue_svc import app as queue_app
from queue_svc import model as queue_model
from queue_svc.config import QueueSettings
from tests.k8s.support import (
    K8S,
    PGBOUNCER_EXPORTER_METRICS,
    POOLER,
    ROOT,
    by_name,
    config_map_data,
    documents,
    env_names_read,
    kustomization_roots,
    metric_names_exported,
    metrics_in,
    monitor_jobs,
    objects,
    of_kind,
    patch_files,
    pod_specs,
    selects,
    yaml_files,
)

SERVERS = ("queue-svc", "booking-svc", "payment-svc", "checkin")
WORKERS = ("admitter", "sweeper", "relay", "issuer", "mailer")
EDGE = "edge"
GRPC_PORT, METRICS_PORT, HEALTH_PORT = 50051, 9464, 50050
DASHBOARD = K8S / "components/monitoring/dashboards/boxoffice.json"
# The waiting room's settings, for the processes of the queue only.
QUEUE_CONFIG = "boxoffice-queue-config"
QUEUE_PROCESSES = {"queue-svc", "admitter"}


def _commands() -> set[str]:
    return {*cli.commands(cli.service_modules()), "up", "migrate"}


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_every_yaml_file_parses_and_every_object_is_named() -> None:
    assert yaml_files()
    for path in yaml_files():
        for doc in documents(path):
            assert "apiVersion" in doc and "kind" in doc, path
            if doc["kind"] not in ("Kustomization", "Component"):
                assert doc["metadata"]["name"], path


def _kustomization_paths(folder: Path) -> list[Path]:
    """Every file a kustomization (or component) names, recursively."""
    (kustomization,) = documents(folder / "kustomization.yaml")
    named: list[Path] = []
    for entry in [*kustomization.get("resources", []), *kustomization.get("components", [])]:
        target = folder / entry
        named.append(target)
        if target.is_dir():
            named.extend(_kustomization_paths(target))
    named.extend(folder / patch["path"] for patch in kustomization.get("patches", []) if "path" in patch)
    for generator in kustomization.get("configMapGenerator", []):
        for item in generator.get("files", []):
            named.append(folder / item.split("=", 1)[-1])
    return named


def test_kustomizations_name_files_that_exist_and_every_manifest_is_used() -> None:
    named = [path for root in kustomization_roots() for path in _kustomization_paths(root)]
    missing = [str(p.relative_to(K8S)) for p in named if not p.exists()]
    assert missing == []
    used = {p.resolve() for p in named if p.is_file()}
    kustomizations = {p.resolve() for p in K8S.rglob("kustomization.yaml")}
    unused = [str(p.relative_to(K8S)) for p in yaml_files() if p.resolve() not in used | kustomizations]
    assert unused == []


def test_a_deployment_for_every_process() -> None:
    deployments = by_name("Deployment")
    assert set(deployments) == {*SERVERS, *WORKERS, EDGE, POOLER}
    assert {c["args"][0] for name, spec in pod_specs() for c in spec["containers"]} == {
        *SERVERS,
        *WORKERS,
        EDGE,
        "migrate",
    }


def test_containers_run_real_cli_commands() -> None:
    commands = _commands()
    for name, spec in pod_specs():
        for container in _containers(spec):
            argv = [*container.get("command", []), *container.get("args", [])]
            assert len(argv) == 1 and argv[0] in commands, (name, argv)
            assert container["image"] == "boxoffice", name  # renamed by the kustomization's images


@pytest.mark.parametrize("name", [*SERVERS, *WORKERS])
def test_deployment_probes_ports_and_shutdown(name: str) -> None:
    spec = by_name("Deployment")[name]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": GRPC_PORT, "metrics": METRICS_PORT, "health": HEALTH_PORT}
    # The kubelet's gRPC probes present no client certificate: they call the
    # plaintext health port, which serves grpc.health.v1 only.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == HEALTH_PORT, (name, probe)
    # SIGTERM comes after the preStop sleep; health then answers NOT_SERVING
    # for BOXOFFICE_DRAIN_SECONDS while calls are served, and in-flight calls
    # get BOXOFFICE_SHUTDOWN_GRACE_SECONDS; all of it, and a margin, inside
    # the grace period. Both come from the ConfigMap every process reads.
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert {"configMapRef": {"name": "boxoffice-config"}} in container["envFrom"]
    server = ServerConfig.from_env(Env(config_map_data()), default_grpc_port=GRPC_PORT)
    assert "BOXOFFICE_DRAIN_SECONDS" in config_map_data() and server.drain_seconds > 0
    needed = float(pre_stop[1]) + server.drain_seconds + server.shutdown_grace_seconds
    assert spec["terminationGracePeriodSeconds"] >= needed + 5, name


def test_processes_listen_where_the_probes_and_scrapes_look() -> None:
    data = config_map_data()
    assert data["BOXOFFICE_GRPC_HOST"] == "0.0.0.0"
    assert int(data["BOXOFFICE_GRPC_PORT"]) == GRPC_PORT
    assert int(data["BOXOFFICE_METRICS_PORT"]) == METRICS_PORT
    assert int(data["BOXOFFICE_HEALTH_PORT"]) == HEALTH_PORT


@pytest.mark.parametrize("workload", [name for name, _ in pod_specs(third_party=True)])
def test_pods_are_locked_down_with_requests_and_limits(workload: str) -> None:
    spec = dict(pod_specs(third_party=True))[workload]
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] > 0
    assert pod["seccompProfile"]["type"] == "RuntimeDefault"
    for container in _containers(spec):
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert not security.get("privileged", False)
        for bound in ("requests", "limits"):
            assert set(container["resources"][bound]) >= {"cpu", "memory"}, (workload, bound)
        # The root filesystem is read-only: /tmp is the one writable place.
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        assert "emptyDir" in volumes[mounts["/tmp"]]
    if workload != "admitter":
        assert spec.get("automountServiceAccountToken") is False, workload


def _labels_ok(labels: dict[str, Any]) -> None:
    assert all(isinstance(v, str) for v in labels.values()), labels
    assert labels["app.kubernetes.io/part-of"] == "boxoffice"
    assert {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"} <= set(labels)


def test_selectors_are_subsets_of_template_labels_without_versions() -> None:
    for kind in ("Deployment", "Job"):
        for obj in of_kind(kind):
            template = obj["spec"]["template"]["metadata"]["labels"]
            _labels_ok(obj["metadata"]["labels"])
            _labels_ok(template)
            if kind == "Deployment":
                selector = obj["spec"]["selector"]["matchLabels"]
                assert selector.items() <= template.items(), obj["metadata"]["name"]
                assert not any("version" in key for key in selector), obj["metadata"]["name"]
    deployments = of_kind("Deployment")
    for kind in ("Service", "PodDisruptionBudget"):
        for obj in of_kind(kind):
            selector = obj["spec"]["selector"] if kind == "Service" else obj["spec"]["selector"]["matchLabels"]
            assert not any("version" in key for key in selector)
            matches = [
                d for d in deployments if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
            ]
            assert len(matches) == 1, (kind, obj["metadata"]["name"])


def test_env_var_names_are_ones_the_code_reads() -> None:
    read = env_names_read()
    assert {"DATABASE_URL", "REDIS_URL", "BOXOFFICE_TOKEN_KEYS", "BOXOFFICE_LEADER_BACKEND"} <= read
    unknown = {key for key in config_map_data() if key not in read}
    for name, spec in pod_specs():
        if name == EDGE:
            continue  # its own settings: test_edge.py
        for container in _containers(spec):
            unknown |= {e["name"] for e in container.get("env", []) if e["name"] not in read}
            for source in container.get("envFrom", []):
                allowed = {"boxoffice-config", QUEUE_CONFIG} if name in QUEUE_PROCESSES else {"boxoffice-config"}
                assert source["configMapRef"]["name"] in allowed, name
    # What the components' patches add (the certificate files, Istio's settings).
    for path in patch_files():
        for patch in documents(path):
            unknown |= {key for key in patch.get("data", {}) if key not in read}
            template = patch.get("spec", {}).get("template", {}).get("spec", {})
            for container in template.get("containers", []):
                unknown |= {e["name"] for e in container.get("env", []) if e["name"] not in read}
    dockerfile_env = set(re.findall(r"\b(BOXOFFICE_[A-Z0-9_]+)=", (ROOT / "Dockerfile").read_text()))
    unknown |= dockerfile_env - read
    assert unknown == set()


def test_the_queues_processes_get_the_waiting_rooms_settings_and_no_one_else() -> None:
    readers = {
        name
        for name, spec in pod_specs()
        for container in _containers(spec)
        for source in container.get("envFrom", [])
        if source["configMapRef"]["name"] == QUEUE_CONFIG
    }
    assert readers == QUEUE_PROCESSES
    data = config_map_data(QUEUE_CONFIG)
    assert {
        "BOXOFFICE_QUEUE_PRESENCE_REPORT_SECONDS",
        "BOXOFFICE_QUEUE_BOOKING_SLOW_P99_MS",
        "BOXOFFICE_QUEUE_BOOKING_ERROR_RATIO",
        "BOXOFFICE_QUEUE_BOOKING_HEALTH_MAX_AGE_SECONDS",
        "BOXOFFICE_QUEUE_NO_SHOW_WINDOW_SECONDS",
    } <= set(data)
    assert set(data) <= env_names_read()
    # The values are ones the queue takes (a bad one would stop it at start).
    settings = QueueSettings.from_env(Env({**config_map_data(), **data}))
    # A fan on a stream is reported several times within the default presence grace.
    assert settings.presence_report_seconds * 3 <= queue_model.DEFAULT_PRESENCE_GRACE_MS / 1000
    # Booking publishes its health every few seconds; it must count for longer than that.
    assert settings.booking_health_max_age_seconds > 5


def test_secrets_come_from_one_secret_and_carry_what_each_process_needs() -> None:
    needs = {
        "queue-svc": {"DATABASE_URL", "REDIS_URL", "BOXOFFICE_TOKEN_KEYS"},
        "booking-svc": {"DATABASE_URL", "REDIS_URL", "BOXOFFICE_TOKEN_KEYS"},
        "payment-svc": {
            "DATABASE_URL",
            "REDIS_URL",
            "BOXOFFICE_TOKEN_KEYS",
            "BOXOFFICE_WEBHOOK_SECRETS",
            "BOXOFFICE_CHECKIN_KEYS",
        },
        # The door verifies codes (and has no use for Redis).
        "checkin": {"DATABASE_URL", "BOXOFFICE_CHECKIN_KEYS"},
        # The issuer signs ticket codes.
        "issuer": {"DATABASE_URL", "REDIS_URL", "BOXOFFICE_CHECKIN_KEYS"},
        # The relay's password is a file of its own Secret (boxoffice-smtp).
        "mailer": {"DATABASE_URL", "REDIS_URL"},
        # Rate limits in Redis, nothing in Postgres (nor may it reach it).
        EDGE: {"REDIS_URL"},
    }
    for name, spec in pod_specs():
        (container,) = spec["containers"]
        from_secret = {
            e["name"]
            for e in container.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})
            and e["valueFrom"]["secretKeyRef"] == {"name": "boxoffice-secrets", "key": e["name"]}
        }
        # Without both URLs a process would start embedded stores instead;
        # every user of Postgres also gets the direct URL for its session
        # locks (DATABASE_URL goes through PgBouncer in transaction mode).
        assert needs.get(name, {"DATABASE_URL", "REDIS_URL"}) <= from_secret, name
        assert ("DATABASE_DIRECT_URL" in from_secret) == ("DATABASE_URL" in from_secret), name
    (edge,) = by_name("Deployment")[EDGE]["spec"]["template"]["spec"]["containers"]
    assert "DATABASE_URL" not in {e["name"] for e in edge["env"]}
    for config in ("boxoffice-config", "boxoffice-edge-config"):
        for key in config_map_data(config):
            assert not re.search(r"URL|KEY|SECRET|PASSWORD", key), f"{key} belongs in the Secret"


def test_admitter_is_leader_elected_on_a_lease_it_may_use() -> None:
    deployment = by_name("Deployment")["admitter"]
    assert deployment["spec"]["replicas"] == 2
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["BOXOFFICE_LEADER_BACKEND"]["value"] == "kubernetes"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"

    account = spec["serviceAccountName"]
    assert account in by_name("ServiceAccount")
    assert spec.get("automountServiceAccountToken", True) is True
    lease = lease_name(queue_app.LEADER_ROLE)  # the Lease the admitter campaigns on
    granted: set[str] = set()
    for binding in of_kind("RoleBinding"):
        if {"kind": "ServiceAccount", "name": account} not in binding["subjects"]:
            continue
        role = by_name(binding["roleRef"]["kind"])[binding["roleRef"]["name"]]
        for rule in role["rules"]:
            if "coordination.k8s.io" in rule["apiGroups"] and "leases" in rule["resources"]:
                # Only that Lease (create cannot be limited by name).
                assert rule.get("resourceNames", [lease]) == [lease]
                granted |= set(rule["verbs"])
    assert granted >= {"get", "create", "update"}
    assert not any(h["spec"]["scaleTargetRef"]["name"] == "admitter" for h in of_kind("HorizontalPodAutoscaler"))


def test_stateless_services_scale_and_every_deployment_has_a_budget() -> None:
    deployments = by_name("Deployment")
    scaled = {h["spec"]["scaleTargetRef"]["name"]: h for h in of_kind("HorizontalPodAutoscaler")}
    assert set(scaled) == {*SERVERS, EDGE}
    for name, hpa in scaled.items():
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment" and name in deployments
        assert 1 < hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    budgets = of_kind("PodDisruptionBudget")
    for name, deployment in deployments.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        (budget,) = [b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert budget["spec"]["maxUnavailable"] == 1, name


def test_services_reach_the_grpc_port_of_the_servers() -> None:
    services = by_name("Service")
    assert set(services) == {*SERVERS, *(f"{name}-headless" for name in SERVERS), EDGE, POOLER}
    for name in SERVERS:
        for service in (services[name], services[f"{name}-headless"]):
            (port,) = service["spec"]["ports"]
            assert port["targetPort"] == "grpc" and port["name"] == "grpc", name
            assert service["spec"]["selector"] == services[name]["spec"]["selector"], name
        # One virtual IP for one-off callers; every pod's address for the mesh.
        assert services[name]["spec"].get("clusterIP") != "None"
        assert services[f"{name}-headless"]["spec"]["clusterIP"] == "None"
    (port,) = services[EDGE]["spec"]["ports"]
    assert port["targetPort"] == "http" and port["name"] == "http"


def _addresses() -> dict[str, str]:
    """Every address variable (``*_ADDR``) of every ConfigMap."""
    found = {}
    for config_map in of_kind("ConfigMap"):
        for key, value in config_map.get("data", {}).items():
            if key.endswith("_ADDR"):
                assert key not in found, key
                found[key] = value
    return found


def test_every_address_is_a_headless_service_the_clients_balance_over() -> None:
    services = by_name("Service")
    addresses = _addresses()
    assert {"BOXOFFICE_BOOKING_ADDR", "BOXOFFICE_QUEUE_ADDR", "BOXOFFICE_PAYMENT_ADDR"} <= set(addresses)
    dialled = set()
    for variable, target in addresses.items():
        # dns:/// names a resolver that answers every address (the clients
        # then apply round_robin); host:port would resolve to one.
        found = re.fullmatch(r"dns:///([a-z0-9-]+)-headless:(\d+)", target)
        assert found is not None, (variable, target)
        server, port = found.group(1), int(found.group(2))
        headless = services[f"{server}-headless"]
        assert headless["spec"]["clusterIP"] == "None"
        assert port == headless["spec"]["ports"][0]["port"], variable
        dialled.add(server)
    assert dialled == set(SERVERS)
    # The clients check the server's certificate against the name they dial.
    certificates = {c["metadata"]["name"]: c for c in of_kind("Certificate")}
    for server in SERVERS:
        (certificate,) = [c for c in certificates.values() if server in c["spec"].get("dnsNames", [])]
        names = set(certificate["spec"]["dnsNames"])
        assert {f"{server}-headless", f"{server}-headless.boxoffice.svc"} <= names, server


def test_deployments_an_autoscaler_manages_set_no_replicas() -> None:
    deployments = by_name("Deployment")
    scaled = {h["spec"]["scaleTargetRef"]["name"] for h in of_kind("HorizontalPodAutoscaler")}
    assert scaled
    for name in scaled:
        # A replicas in the manifest resets the autoscaler's count at every apply.
        assert "replicas" not in deployments[name]["spec"], name
    for name in set(deployments) - scaled:
        assert deployments[name]["spec"]["replicas"] >= 2, name


def test_the_migration_job_migrates() -> None:
    (job,) = of_kind("Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["migrate"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("OnFailure", "Never")


def test_prometheus_scrapes_every_process_once_where_it_serves_metrics() -> None:
    monitors = of_kind("PodMonitor")
    jobs = monitor_jobs()
    for deployment in of_kind("Deployment"):
        name = deployment["metadata"]["name"]
        template = deployment["spec"]["template"]
        # PgBouncer serves none itself: its exporter sidecar does.
        ports = {p["name"] for container in template["spec"]["containers"] for p in container.get("ports", [])}
        scrapes = [
            (monitor["metadata"]["name"], endpoint)
            for monitor in monitors
            if selects(monitor["spec"]["selector"], template["metadata"]["labels"])
            for endpoint in monitor["spec"]["podMetricsEndpoints"]
            if endpoint["port"] in ports
        ]
        ((monitor, endpoint),) = scrapes
        assert endpoint["path"] == "/metrics"
        expected = "http" if name == EDGE else "metrics"
        assert endpoint["port"] == expected, name
        job = {EDGE: "boxoffice-edge", POOLER: "boxoffice-pgbouncer"}.get(name, "boxoffice")
        assert jobs[monitor] == job, name
    # Fixed, distinct jobs: what the alerts select on.
    assert sorted(jobs.values()) == ["boxoffice", "boxoffice-edge", "boxoffice-pgbouncer"]


def _dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_dashboard_parses_and_queries_metrics_the_code_exports() -> None:
    queries = _dashboard_queries()
    used = set().union(*(metrics_in(q) for q in queries))
    assert used - metric_names_exported() == set()
    assert {
        "grpc_server_handled_total",
        "grpc_server_handling_seconds_bucket",
        "boxoffice_queue_length",
        "boxoffice_queue_active_shoppers",
        "boxoffice_queue_admitted_total",
        "boxoffice_booking_holds_total",
        "boxoffice_payment_state_entered_total",
        "boxoffice_outbox_lag_seconds",
        "boxoffice_leader_is_leader",
        "boxoffice_queue_admission_rate_target",
        "boxoffice_queue_admission_rate_reason",
        "boxoffice_queue_dropped_total",
        "boxoffice_queue_no_shows_total",
    } <= used
    assert any("grpc_code" in q and "grpc_server_handled_total" in q for q in queries)
    assert {"0.50", "0.90", "0.99"} <= set(re.findall(r"histogram_quantile\((0\.\d+)", " ".join(queries)))


def test_alert_rules_cover_the_failures_that_matter() -> None:
    (rule,) = of_kind("PrometheusRule")
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert {
        "BoxofficeGrpcErrorRatioHigh",
        "BoxofficeGrpcLatencyHigh",
        "BoxofficeAdmitterNotLeading",
        "BoxofficeAdmitterNotAdmitting",
        "BoxofficeOutboxLagHigh",
        "BoxofficeSweeperStalled",
        "BoxofficePgbouncerClientsWaiting",
    } <= set(alerts)
    for name, alert in alerts.items():
        # The code's metrics, or PgBouncer's exporter's.
        read = metrics_in(alert["expr"]) | {
            metric for metric in PGBOUNCER_EXPORTER_METRICS if re.search(rf"\b{metric}\b", alert["expr"])
        }
        assert read and read <= metric_names_exported() | PGBOUNCER_EXPORTER_METRICS, name
        assert alert["labels"]["severity"] in ("critical", "warning", "info"), name
        assert alert["annotations"]["summary"], name


def test_dockerfile_installs_the_project_as_a_non_root_user() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE)
    assert stages and all(image == "python:3.11-slim" for image in stages)
    users = re.findall(r"^USER (\S+)", text, flags=re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    # What a cluster needs (the Kubernetes client for leader election), and
    # no embedded stores: a cluster names its Postgres and Redis.
    installs = re.findall(r"pip install (\S+)", text)
    assert installs == ['".[kubernetes]"'], installs
    assert re.search(r'^ENTRYPOINT \["boxoffice"\]', text, flags=re.MULTILINE)
    copied = set(re.findall(r"^COPY (?!--from)(\S+)", text, flags=re.MULTILINE))
    project = (ROOT / "pyproject.toml").read_text()
    includes = re.search(r"include = \[(.*?)\]", project)
    assert includes is not None
    packages = {p.strip().strip('"').rstrip("*") for p in includes.group(1).split(",")}
    assert packages <= copied
    assert "pyproject.toml" in copied
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert {f"!{p}/" for p in packages} <= set(ignored)


def test_object_names_are_unique_per_kind() -> None:
    seen: set[tuple[str, str]] = set()
    for obj in objects():
        key = (obj["kind"], obj["metadata"]["name"])
        assert key not in seen, key
        seen.add(key)


def test_the_target_rate_panel_names_its_reason_from_the_leading_admitter_only() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    (panel,) = [
        p
        for p in dashboard["panels"]
        if any("boxoffice_queue_admission_rate_target" in t["expr"] for t in p.get("targets", []))
    ]
    (target,) = [t for t in panel["targets"] if "boxoffice_queue_admission_rate_target" in t["expr"]]
    # One series per event and reason: the reason gauge's 1, carrying the
    # target's value, from the admitter that leads (a former leader's
    # gauges keep their last values).
    assert "by (event_id, reason)" in target["expr"] and "group_right" in target["expr"]
    assert "boxoffice_queue_admission_rate_reason" in target["expr"] and "== 1" in target["expr"]
    assert (
        'boxoffice_leader_is_leader{namespace="$namespace",job="boxoffice",pod=~"$pod",name="admitter"} == 1'
        in target["expr"]
    )
    assert "{{reason}}" in target["legendFormat"] and "{{event_id}}" in target["legendFormat"]
    assert panel["fieldConfig"]["defaults"]["unit"] == "ops"


def test_panels_do_not_overlap() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, panel["title"]
        for x in range(box["x"], box["x"] + box["w"]):
            for y in range(box["y"], box["y"] + box["h"]):
                assert (x, y) not in taken, (panel["title"], taken.get((x, y)))
                taken[x, y] = panel["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_each_axis_of_a_panel_has_one_unit() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        axes = {"left": {panel["fieldConfig"]["defaults"]["unit"]}}
        for override in panel["fieldConfig"]["overrides"]:
            properties = {p["id"]: p["value"] for p in override["properties"]}
            if "unit" in properties:
                # A second unit goes on the other axis.
                side = properties.get("custom.axisPlacement", "left")
                axes.setdefault(side, set()).add(properties["unit"])
        assert all(len(units) == 1 for units in axes.values()), (panel["title"], axes)
