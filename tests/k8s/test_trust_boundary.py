"""The trust boundary in the manifests, checked against the one
authorization table (:mod:`boxoffice.access`): the NetworkPolicies open
only the paths the table allows, each process runs as the ServiceAccount of
its role and carries that role's certificate (cert-manager), and Istio's
AuthorizationPolicies are the table, generated. The rendered manifests of
every kustomization validate against the Kubernetes schemas."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boxoffice import access
from tests.k8s.support import (
    K8S,
    PROMETHEUS,
    ROOT,
    built,
    by_name,
    config_map_data,
    documents,
    ingress_rules,
    kustomization_roots,
    needs_kubectl,
    of_kind,
    selects,
)

GRPC_PORT, METRICS_PORT, HEALTH_PORT, EDGE_PORT = 50051, 9464, 50050, 8080
TRUST_DOMAIN, NAMESPACE = "boxoffice.local", "boxoffice"
TLS_DIR = "/var/run/boxoffice/tls"

# Role of the mesh -> the app.kubernetes.io/name of its pods. Operators'
# toolbox pods are not Deployments: the policies select them by this label
# all the same.
WORKLOAD = {
    access.EDGE: "edge",
    access.QUEUE: "queue-svc",
    access.BOOKING: "booking-svc",
    access.PAYMENT: "payment-svc",
    access.ADMITTER: "admitter",
    access.SWEEPER: "sweeper",
    access.RELAY: "relay",
    access.ISSUER: "issuer",
    access.MAILER: "mailer",
    access.CHECKIN: "checkin",
    access.OPERATOR: "operator",
}
ROLE = {workload: role for role, workload in WORKLOAD.items()}
DEPLOYED = (
    access.EDGE,
    access.QUEUE,
    access.BOOKING,
    access.PAYMENT,
    access.ADMITTER,
    access.SWEEPER,
    access.RELAY,
    access.ISSUER,
    access.MAILER,
    access.CHECKIN,
)
# The contract packages each server serves.
# (PaymentService's process also serves the mailer's admin contract.)
SERVES: dict[str, tuple[str, ...]] = {
    "queue-svc": ("boxoffice.queue.",),
    "booking-svc": ("boxoffice.booking.",),
    "payment-svc": ("boxoffice.payment.", "boxoffice.mail."),
    "checkin": ("boxoffice.checkin.",),
}
ISTIO_POLICIES = K8S / "components/istio/authorization-policies.yaml"


def _labels(role: str) -> dict[str, str]:
    """The labels of ``role``'s pods."""
    deployments = by_name("Deployment")
    if WORKLOAD[role] in deployments:
        return dict(deployments[WORKLOAD[role]]["spec"]["template"]["metadata"]["labels"])
    return {
        "app.kubernetes.io/name": WORKLOAD[role],
        "app.kubernetes.io/instance": "boxoffice",
        "app.kubernetes.io/part-of": "boxoffice",
    }


def _policies(kind: str, role: str) -> Iterator[dict[str, Any]]:
    """The NetworkPolicies that apply to ``role``'s pods for ``kind``
    (Ingress or Egress)."""
    for policy in of_kind("NetworkPolicy"):
        spec = policy["spec"]
        if kind in spec["policyTypes"] and selects(spec["podSelector"], _labels(role)):
            yield policy


def _ports(rule: dict[str, Any]) -> set[int]:
    assert all(p.get("protocol", "TCP") in ("TCP", "UDP") for p in rule.get("ports", [])), rule
    return {p["port"] for p in rule.get("ports", [])}


def _peer_roles(peers: list[dict[str, Any]]) -> set[str]:
    """The roles a rule's peers admit; a peer that is not a pod of this
    namespace selected by its name label fails the test."""
    roles = set()
    for peer in peers:
        assert set(peer) == {"podSelector"}, f"not a pod of the namespace: {peer}"
        matched = [role for role in access.ROLES if selects(peer["podSelector"], _labels(role))]
        assert len(matched) == 1, f"{peer} selects {matched}"
        roles.update(matched)
    return roles


def _table_roles(workload: str) -> set[str]:
    """The roles the table allows on the contracts ``workload`` serves."""
    prefixes = SERVES.get(workload)
    if prefixes is None:
        return set()
    served = tuple(f"/{prefix}" for prefix in prefixes)
    return set().union(*(roles for method, roles in access.POLICY.items() if method.startswith(served)))


def _grpc_callers(workload: str) -> set[str]:
    roles: set[str] = set()
    for policy in _policies("Ingress", ROLE[workload]):
        for rule in policy["spec"].get("ingress", []):
            if GRPC_PORT in _ports(rule):
                assert "from" in rule and "ports" in rule, f"{policy['metadata']['name']} opens gRPC to anyone"
                roles |= _peer_roles(rule["from"])
    return roles


def test_the_namespace_denies_everything_not_allowed() -> None:
    denies = [
        p
        for p in of_kind("NetworkPolicy")
        if p["spec"]["podSelector"] == {} and set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    ]
    assert len(denies) == 1
    assert "ingress" not in denies[0]["spec"] and "egress" not in denies[0]["spec"]


@pytest.mark.parametrize("workload", [WORKLOAD[role] for role in DEPLOYED])
def test_grpc_ingress_admits_exactly_the_roles_the_table_allows(workload: str) -> None:
    # Health is for the probes, on their own port; reflection, which the
    # table grants every role, is not a path the mesh uses, so the network
    # does not open it.
    table = _table_roles(workload)
    assert _grpc_callers(workload) == table
    assert table or workload not in SERVES


def test_every_grpc_caller_may_leave_for_the_services_it_calls() -> None:
    for workload in SERVES:
        for caller in _table_roles(workload):
            reachable = set()
            for policy in _policies("Egress", caller):
                for rule in policy["spec"].get("egress", []):
                    if GRPC_PORT in _ports(rule) and "to" in rule:
                        reachable |= {WORKLOAD[role] for role in _peer_roles(rule["to"])}
            assert workload in reachable, (caller, workload)


def _egress_ports(role: str, peer: dict[str, Any] | None = None) -> set[int]:
    ports: set[int] = set()
    for policy in _policies("Egress", role):
        for rule in policy["spec"].get("egress", []):
            if peer is None or peer in rule.get("to", []):
                ports |= _ports(rule)
    return ports


DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}


@pytest.mark.parametrize("role", DEPLOYED)
def test_every_process_reaches_dns_its_stores_and_prometheus_reaches_it(role: str) -> None:
    assert _egress_ports(role, DNS) == {53}
    # The edge keeps its rate limits in Redis and nothing in Postgres.
    stores = {6379} if role == access.EDGE else {5432, 6379}
    assert _egress_ports(role) & {5432, 6379} == stores
    scraped = [
        rule
        for policy in _policies("Ingress", role)
        for rule in policy["spec"].get("ingress", [])
        if PROMETHEUS in rule.get("from", [])
    ]
    # The edge serves /metrics on its one port.
    assert [_ports(rule) for rule in scraped] == [{EDGE_PORT if role == access.EDGE else METRICS_PORT}]


def _rules(kind: str, role: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(policy name, rule) of every rule that applies to ``role``'s pods."""
    key = "ingress" if kind == "Ingress" else "egress"
    for policy in _policies(kind, role):
        for rule in policy["spec"].get(key, []):
            yield policy["metadata"]["name"], rule


def _flows(kind: str, role: str) -> set[tuple[str, str, int]]:
    """(protocol, peer, port) of every flow the policies open for ``role``;
    the peer is a role of the mesh, "DNS", "Prometheus", "Redis", "Postgres"
    or "anyone"."""
    stores = {
        "Redis": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "redis"}}},
        "Postgres": {
            "namespaceSelector": {},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "postgresql"}},
        },
    }
    named = {"DNS": DNS, "Prometheus": PROMETHEUS, **stores}
    flows = set()
    for policy, rule in _rules(kind, role):
        assert rule.get("ports"), f"{policy} opens every port"
        peers = rule.get("from" if kind == "Ingress" else "to")
        names = ["anyone"] if peers is None else []
        for peer in peers or []:
            found = [name for name, selector in named.items() if peer == selector]
            names += found or sorted(_peer_roles([peer]))
        for port in rule["ports"]:
            flows |= {(port.get("protocol", "TCP"), name, port["port"]) for name in names}
    return flows


def test_the_edge_reaches_the_services_redis_and_dns_only() -> None:
    services = {("TCP", role, GRPC_PORT) for role in (access.QUEUE, access.BOOKING, access.PAYMENT, access.CHECKIN)}
    dns = {("UDP", "DNS", 53), ("TCP", "DNS", 53)}
    assert _flows("Egress", access.EDGE) == services | {("TCP", "Redis", 6379)} | dns


def test_the_edge_is_reached_on_its_http_port_only() -> None:
    # From anywhere (the ingress controller, wherever it runs; README.md
    # says how to narrow it) and from Prometheus, which keeps its own rule
    # when the first is narrowed.
    assert _flows("Ingress", access.EDGE) == {("TCP", "anyone", EDGE_PORT), ("TCP", "Prometheus", EDGE_PORT)}


def _pgbouncer_labels() -> dict[str, str]:
    return dict(by_name("Deployment")["pgbouncer"]["spec"]["template"]["metadata"]["labels"])


def test_every_user_of_postgres_reaches_pgbouncer_and_only_they_do() -> None:
    pgbouncer = _pgbouncer_labels()
    # Every process but the edge, and the operators' toolbox (which may
    # reach Postgres too, for the runbooks' queries).
    users = {role for role in DEPLOYED if role != access.EDGE} | {access.OPERATOR}
    for role in [*DEPLOYED, access.OPERATOR]:
        reaches = any(
            6432 in _ports(rule) and any(selects(peer.get("podSelector", {}), pgbouncer) for peer in rule.get("to", []))
            for _, rule in _rules("Egress", role)
        )
        assert reaches == (role in users), role
    admitted: set[str] = set()
    for _, rule in ingress_rules(pgbouncer):
        if 6432 in _ports(rule):
            assert rule.get("from"), "PgBouncer open to anyone"
            for peer in rule["from"]:
                assert set(peer) == {"podSelector"}, peer
                admitted |= {r for r in access.ROLES if selects(peer["podSelector"], _labels(r))}
    assert admitted == users


def test_pgbouncer_reaches_postgres_and_dns_only() -> None:
    pgbouncer = _pgbouncer_labels()
    ports: set[int] = set()
    for policy in of_kind("NetworkPolicy"):
        spec = policy["spec"]
        if "Egress" in spec["policyTypes"] and selects(spec["podSelector"], pgbouncer):
            for rule in spec.get("egress", []):
                ports |= _ports(rule)
    assert ports == {5432, 53}


def test_only_the_admitter_reaches_the_api_server() -> None:
    for role in [*DEPLOYED, access.OPERATOR]:
        api = {443, 6443} <= _egress_ports(role)
        assert api == (role == access.ADMITTER), role


def test_no_service_exposes_the_plaintext_health_port() -> None:
    own_port = {"edge": "http", "pgbouncer": "pgbouncer"}
    for name, service in by_name("Service").items():
        assert {p["targetPort"] for p in service["spec"]["ports"]} == {own_port.get(name, "grpc")}, name
    # Nor does any NetworkPolicy open it: the kubelet probes from the node.
    for policy in of_kind("NetworkPolicy"):
        for rule in policy["spec"].get("ingress", []):
            assert HEALTH_PORT not in _ports(rule), policy["metadata"]["name"]


@pytest.mark.parametrize("role", DEPLOYED)
def test_every_process_runs_as_the_service_account_of_its_role(role: str) -> None:
    spec = by_name("Deployment")[WORKLOAD[role]]["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == role
    assert role in by_name("ServiceAccount")


def test_operators_have_an_identity_in_the_namespace() -> None:
    account = by_name("ServiceAccount")[access.OPERATOR]
    assert account["automountServiceAccountToken"] is False


def _namespace() -> str:
    (kustomization,) = documents(K8S / "kustomization.yaml")
    return str(kustomization["namespace"])


def test_a_certificate_per_role_names_its_spiffe_id() -> None:
    assert config_map_data()["BOXOFFICE_TRUST_DOMAIN"] == TRUST_DOMAIN
    assert _namespace() == NAMESPACE
    (issuer,) = of_kind("Issuer")
    assert issuer["spec"] == {"ca": {"secretName": "boxoffice-ca"}}
    certificates = {c["spec"]["uris"][0]: c for c in of_kind("Certificate")}
    assert set(certificates) == {access.spiffe_id(TRUST_DOMAIN, NAMESPACE, role) for role in access.ROLES}
    for uri, certificate in certificates.items():
        spec = certificate["spec"]
        role = access.role_of(uri, TRUST_DOMAIN)
        assert role is not None and spec["uris"] == [uri]
        assert spec["secretName"] == f"boxoffice-tls-{role}"
        assert spec["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer", "name": "boxoffice-ca"}
        assert {"client auth", "server auth"} <= set(spec["usages"])
        assert spec["privateKey"]["rotationPolicy"] == "Always"
        service = WORKLOAD[role]
        if service in SERVES:  # clients that check the host name dial the Service
            assert f"{service}.{NAMESPACE}.svc" in spec["dnsNames"]


@needs_kubectl
@pytest.mark.parametrize("role", DEPLOYED)
def test_every_process_mounts_its_roles_certificate_where_the_settings_say(role: str) -> None:
    (deployment,) = [o for o in built(K8S) if o["kind"] == "Deployment" and o["metadata"]["name"] == WORKLOAD[role]]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == TLS_DIR]
    assert mount.get("readOnly") is True
    assert "subPath" not in mount  # a subPath mount is never updated on renewal
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == f"boxoffice-tls-{spec['serviceAccountName']}"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["BOXOFFICE_TLS_CERT_FILE"] == f"{TLS_DIR}/tls.crt"
    assert env["BOXOFFICE_TLS_KEY_FILE"] == f"{TLS_DIR}/tls.key"
    assert env["BOXOFFICE_TLS_CA_FILE"] == f"{TLS_DIR}/ca.crt"


def test_istio_policies_are_the_generated_table() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/gen_istio_policies.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def _principal(role: str) -> str:
    return access.spiffe_id(TRUST_DOMAIN, NAMESPACE, role).removeprefix("spiffe://")


def test_istio_allows_each_method_to_exactly_its_roles() -> None:
    policies = {p["metadata"]["name"]: p for p in documents(ISTIO_POLICIES)}
    assert policies.pop("allow-nothing")["spec"] == {}
    everyone = {_principal(role) for role in access.ROLES}
    allowed: dict[tuple[str, str], set[str]] = {}
    for policy in policies.values():
        spec = policy["spec"]
        assert spec["action"] == "ALLOW"
        workload = spec["selector"]["matchLabels"]["app.kubernetes.io/name"]
        for rule in spec["rules"]:
            sources = [s["source"]["principals"] for s in rule.get("from", [])]
            principals = set().union(*sources) if sources else {"*"}
            for operation in rule["to"]:
                for path in operation["operation"]["paths"]:
                    assert (workload, path) not in allowed, (workload, path)
                    allowed[(workload, path)] = principals
    for method, roles in access.POLICY.items():
        service = method.split("/")[1]
        workloads = [w for w, prefixes in SERVES.items() if service.startswith(prefixes)]
        if service.startswith(("grpc.health.", "grpc.reflection.")):
            # Every process but the edge, which serves HTTP only.
            workloads = [WORKLOAD[role] for role in DEPLOYED if role != access.EDGE]
        assert workloads, method
        expected = {"*"} if access.ANYONE in roles else {_principal(role) for role in roles}
        for workload in workloads:
            assert allowed.pop((workload, method)) == expected, (workload, method)
            assert expected <= everyone | {"*"}
    assert allowed == {}  # nothing the table does not name


@needs_kubectl
def test_with_istio_the_sidecars_do_the_tls() -> None:
    (istio,) = [root for root in kustomization_roots() if root.name == "istio"]
    objects = built(istio)
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "boxoffice-config"]
    assert config["data"]["BOXOFFICE_TLS"] == "off" and config["data"]["BOXOFFICE_TLS_MESH_IDENTITY"] == "xfcc"
    (peer,) = [o for o in objects if o["kind"] == "PeerAuthentication"]
    assert peer["spec"] == {"mtls": {"mode": "STRICT"}}
    assert not [o for o in objects if o["apiVersion"].startswith("cert-manager.io/")]
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        template = deployment["spec"]["template"]
        if deployment["metadata"]["name"] == "pgbouncer":
            # Outside the mesh (overlays/istio says why).
            assert template["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
            assert "traffic.sidecar.istio.io/excludeInboundPorts" not in template["metadata"].get("annotations", {})
            continue
        assert template["metadata"]["labels"]["sidecar.istio.io/inject"] == "true"
        excluded = template["metadata"]["annotations"]["traffic.sidecar.istio.io/excludeInboundPorts"]
        # Prometheus and the kubelet are outside the mesh; so are the
        # ingress controller and the fans behind the edge's public port.
        outside = {EDGE_PORT} if deployment["metadata"]["name"] == "edge" else {METRICS_PORT, HEALTH_PORT}
        assert set(excluded.split(",")) == {str(port) for port in outside}
        (container,) = template["spec"]["containers"]
        assert not [e for e in container["env"] if e["name"].startswith("BOXOFFICE_TLS_")]
    (job,) = [o for o in objects if o["kind"] == "Job"]
    assert job["spec"]["template"]["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"


def _roots() -> list[Path]:
    return [K8S / "base", *kustomization_roots()]


@needs_kubectl
@pytest.mark.parametrize("root", _roots(), ids=lambda p: str(p.relative_to(K8S)) or "default")
def test_every_kustomization_builds_one_namespace(root: Path) -> None:
    objects = built(root)
    assert objects
    if root != K8S / "base":
        assert {o["metadata"].get("namespace") for o in objects} == {NAMESPACE}
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names))


# Kinds the Kubernetes schemas do not describe (CRDs): checked field by
# field above instead.
_CUSTOM = ("cert-manager.io/", "security.istio.io/", "networking.istio.io/", "monitoring.coreos.com/")


@needs_kubectl
@pytest.mark.parametrize("version", ["1.30.0", "1.37.0"])
@pytest.mark.parametrize("root", _roots(), ids=lambda p: str(p.relative_to(K8S)) or "default")
def test_rendered_manifests_validate_strictly_against_the_kubernetes_schemas(root: Path, version: str) -> None:
    validator: Any = pytest.importorskip("kubernetes_validate")
    checked = 0
    for obj in built(root):
        if obj["apiVersion"].startswith(_CUSTOM):
            continue
        validator.validate(obj, version, strict=True)
        checked += 1
    assert checked > 0
