"""Reading the Kubernetes manifests and what the code offers to check them
against: the CLI's commands, the environment variables the code reads, the
metric names it exports."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.support import unavailable, under_ci

# PyYAML (a dependency of kubernetes_asyncio) ships no type stubs.
yaml: Any = importlib.import_module("yaml")

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
CODE_PACKAGES = (
    "boxoffice",
    "boxoffice_cli",
    "queue_svc",
    "booking_svc",
    "payment_svc",
    "checkin_svc",
    "edge_svc",
    "mail_svc",
)

# The sample names the edge's panels and alerts read (edge_svc/metrics.py).
EDGE_METRICS = frozenset(
    {
        "boxoffice_edge_http_requests_total",
        "boxoffice_edge_http_request_duration_seconds_bucket",
        "boxoffice_edge_http_request_duration_seconds_sum",
        "boxoffice_edge_http_request_duration_seconds_count",
        "boxoffice_edge_http_requests_in_flight",
        "boxoffice_edge_sse_connections",
        "boxoffice_edge_progress_streams",
        "boxoffice_edge_progress_updates_total",
        "boxoffice_edge_rate_limited_total",
        "boxoffice_edge_upstream_errors_total",
    }
)

# The sample names of PgBouncer's exporter (components/pgbouncer's sidecar,
# prometheus-community's pgbouncer_exporter) that the alerts read.
PGBOUNCER_EXPORTER_METRICS = frozenset({"pgbouncer_pools_client_waiting_connections"})

_ENV_READERS = frozenset(
    {"string", "integer", "number", "flag", "choice", "grpc_target", "keys", "optional_str", "raw", "getenv"}
)
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_METRIC_TYPES = {"Counter", "Gauge", "Histogram", "Summary"}
_METRIC_IN_QUERY = re.compile(r"\b((?:boxoffice|grpc_server)_[a-z0-9_]+)\b")


def yaml_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*") if p.suffix in (".yaml", ".yml"))


@cache
def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def kustomization_roots() -> list[Path]:
    """The folders ``kubectl apply -k`` is meant for: ``k8s/`` (the default)
    and every overlay."""
    overlays = K8S / "overlays"
    return [K8S, *sorted(p for p in overlays.iterdir() if (p / "kustomization.yaml").exists())]


@cache
def patch_files() -> frozenset[Path]:
    """The files kustomizations and components name as patches: partial
    objects, not manifests of their own."""
    found = set()
    for kustomization in K8S.rglob("kustomization.yaml"):
        for doc in documents(kustomization):
            for patch in doc.get("patches", []):
                if "path" in patch:
                    found.add((kustomization.parent / patch["path"]).resolve())
    return frozenset(found)


KUBECTL_MISSING = "kubectl (for kustomize) is not on PATH"


def kubectl() -> str | None:
    return shutil.which("kubectl")


# For a test that renders the manifests: skipped without kubectl, except
# under CI, where :func:`built` fails it with the reason.
needs_kubectl = pytest.mark.skipif(kubectl() is None and not under_ci(), reason=KUBECTL_MISSING)


@cache
def built(root: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize root`` renders (without kubectl the
    test fails under CI and is skipped elsewhere)."""
    command = kubectl()
    if command is None:
        unavailable(KUBECTL_MISSING)
    result = subprocess.run([command, "kustomize", str(root)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


def objects(under: Path = K8S) -> list[dict[str, Any]]:
    """Every Kubernetes object in the YAML files under ``under`` (not the
    kustomizations themselves, nor the patches they apply)."""
    found = []
    for path in yaml_files():
        if not path.is_relative_to(under) or path.resolve() in patch_files():
            continue
        for doc in documents(path):
            if doc.get("kind") not in ("Kustomization", "Component"):
                found.append(doc)
    return found


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [o for o in objects() if o["kind"] == kind]


def by_name(kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in of_kind(kind)}


# Workloads of another program than boxoffice (components/pgbouncer).
POOLER = "pgbouncer"

# Prometheus, as the NetworkPolicies name the peer it scrapes from.
PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) selects ``labels``."""
    assert set(selector) <= {"matchLabels", "matchExpressions"}, selector
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        assert operator in ("In", "NotIn", "Exists", "DoesNotExist"), expression
    return True


def ingress_rules(labels: dict[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(policy name, rule) of every ingress rule of the NetworkPolicies that
    apply to pods labelled ``labels``."""
    for policy in of_kind("NetworkPolicy"):
        spec = policy["spec"]
        if "Ingress" in spec["policyTypes"] and selects(spec["podSelector"], labels):
            for rule in spec.get("ingress", []):
                yield policy["metadata"]["name"], rule


def pod_specs(*, third_party: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
    """(workload name, pod spec) of every Deployment and Job of boxoffice's
    image (and, with ``third_party``, the others too: PgBouncer)."""
    for kind in ("Deployment", "Job"):
        for obj in of_kind(kind):
            if third_party or obj["metadata"]["name"] != POOLER:
                yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]


def _python_files() -> Iterator[Path]:
    for package in CODE_PACKAGES:
        yield from (ROOT / package).rglob("*.py")


def _calls() -> Iterator[ast.Call]:
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                yield node


def _first_str(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    for keyword in call.keywords:
        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value
    return None


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def _reads_name(tree: ast.AST, variable: str) -> bool:
    """Whether ``tree`` calls an ``Env`` reader with ``variable`` as the name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node) in _ENV_READERS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Name) and first.id == variable:
                return True
    return False


def _names_read_in_loops(module: ast.Module) -> Iterator[str]:
    """Names read in a loop over a module-level tuple of names
    (``for name in _FILES: env.optional_str(name)``)."""
    tuples: dict[str, list[str]] = {}
    for statement in module.body:
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Tuple | ast.List):
            items = [e.value for e in statement.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if items and len(items) == len(statement.value.elts):
                for target in statement.targets:
                    if isinstance(target, ast.Name):
                        tuples[target.id] = items
    for node in ast.walk(module):
        loops: list[tuple[ast.expr, ast.expr, ast.AST]] = []
        if isinstance(node, ast.For):
            loops.append((node.target, node.iter, ast.Module(body=node.body, type_ignores=[])))
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            loops.extend((g.target, g.iter, node) for g in node.generators)
        for target, iterable, body in loops:
            if isinstance(target, ast.Name) and isinstance(iterable, ast.Name) and iterable.id in tuples:
                if _reads_name(body, target.id):
                    yield from tuples[iterable.id]


@cache
def env_names_read() -> frozenset[str]:
    """Environment variables the code reads (through ``Env`` or ``os.getenv``,
    by a literal name or in a loop over a module-level tuple of names; a
    secret read with ``read_secret`` also as ``NAME_FILE``)."""
    names = set()
    for call in _calls():
        name = _first_str(call)
        if _callee(call) in _ENV_READERS and name is not None and _ENV_NAME.match(name):
            names.add(name)
        # A helper handed the environment and a name: ``_networks(env, "NAME")``.
        if len(call.args) >= 2 and isinstance(call.args[0], ast.Name) and call.args[0].id == "env":
            second = call.args[1]
            if isinstance(second, ast.Constant) and isinstance(second.value, str) and _ENV_NAME.match(second.value):
                names.add(second.value)
    for path in _python_files():
        module = ast.parse(path.read_text(), str(path))
        names.update(n for n in _names_read_in_loops(module) if _ENV_NAME.match(n))
        names.update(_named_constants_read(module))
    names.update(f"{name}_FILE" for name in _secrets_read())
    return frozenset(names)


def _string_constants() -> dict[str, str]:
    """Module-level ``NAME = "value"`` and ``NAME = module.OTHER`` of every
    module, by NAME (aliases resolved; the code's constant names are unique
    enough for this)."""
    literal: dict[str, str] = {}
    alias: dict[str, str] = {}
    for path in _python_files():
        for statement in ast.parse(path.read_text(), str(path)).body:
            if not isinstance(statement, ast.Assign):
                continue
            value = statement.value
            for target in statement.targets:
                if not isinstance(target, ast.Name):
                    continue
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    literal[target.id] = value.value
                elif isinstance(value, ast.Attribute):
                    alias[target.id] = value.attr
                elif isinstance(value, ast.Name):
                    alias[target.id] = value.id
    for name, other in alias.items():
        seen = {name}
        while other in alias and other not in seen:
            seen.add(other)
            other = alias[other]
        if other in literal:
            literal.setdefault(name, literal[other])
    return literal


def _secrets_read() -> Iterator[str]:
    """The names ``read_secret(env, NAME, ...)`` reads (which also reads
    ``NAME_FILE``, a mounted Secret)."""
    constants = _string_constants()
    for call in _calls():
        if _callee(call) != "read_secret" or len(call.args) < 2:
            continue
        argument = call.args[1]
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            yield argument.value
        elif isinstance(argument, ast.Name | ast.Attribute):
            key = argument.id if isinstance(argument, ast.Name) else argument.attr
            if key in constants:
                yield constants[key]


def _named_constants_read(module: ast.Module) -> Iterator[str]:
    """Variables named by a module-level constant (``TOKEN_KEYS =
    "BOXOFFICE_TOKEN_KEYS"``) in a module that reads the environment by a
    name it does not spell out (``env.raw(variable)``)."""
    reads_by_name = any(
        isinstance(node, ast.Call)
        and _callee(node) in _ENV_READERS
        and node.args
        and not isinstance(node.args[0], ast.Constant)
        for node in ast.walk(module)
    )
    if not reads_by_name:
        return
    for statement in module.body:
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant):
            value = statement.value.value
            if isinstance(value, str) and value.startswith("BOXOFFICE_") and _ENV_NAME.match(value):
                yield value


@cache
def metric_names_exported() -> frozenset[str]:
    """Sample names the code's metrics expose (``_total`` for counters,
    ``_bucket``/``_sum``/``_count`` for histograms)."""
    names = set()
    for call in _calls():
        kind = _callee(call)
        name = _first_str(call)
        if kind not in _METRIC_TYPES or name is None:
            continue
        if kind == "Counter":
            names.add(name.removesuffix("_total") + "_total")
        elif kind == "Gauge":
            names.add(name)
        elif kind == "Histogram":
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.update(f"{name}{suffix}" for suffix in ("", "_sum", "_count"))
    return frozenset(names)


def metrics_in(query: str) -> set[str]:
    return set(_METRIC_IN_QUERY.findall(query))


def config_map_data(name: str = "boxoffice-config") -> dict[str, str]:
    return dict(by_name("ConfigMap")[name]["data"])


def monitor_jobs() -> dict[str, str]:
    """PodMonitor name -> the job its targets get (a fixed relabelling)."""
    jobs = {}
    for monitor in of_kind("PodMonitor"):
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        (job,) = [r for r in endpoint["relabelings"] if r["targetLabel"] == "job"]
        assert "sourceLabels" not in job and job.get("action", "replace") == "replace"
        jobs[monitor["metadata"]["name"]] = job["replacement"]
    return jobs


def promtool() -> str:
    """promtool's path (Debian's prometheus package; the test command
    installs it with scripts/ops_deps.sh). Missing, the test fails under CI
    and is skipped elsewhere."""
    found = shutil.which("promtool")
    if found is None:
        unavailable("promtool (Debian package prometheus) is not installed: run scripts/ops_deps.sh as root")
    return found
