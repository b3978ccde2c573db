"""Reading the Kubernetes manifests and what the code offers to check them
against: the CLI's commands, the environment variables the code reads, the
metric names it exports."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

# PyYAML (a dependency of kubernetes_asyncio) ships no type stubs.
yaml: Any = importlib.import_module("yaml")

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
CODE_PACKAGES = ("boxoffice", "boxoffice_cli", "queue_svc", "booking_svc", "payment_svc")

_ENV_READERS = frozenset({"string", "integer", "number", "flag", "choice", "keys", "optional_str", "raw", "getenv"})
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_METRIC_TYPES = {"Counter", "Gauge", "Histogram", "Summary"}
_METRIC_IN_QUERY = re.compile(r"\b((?:boxoffice|grpc_server)_[a-z0-9_]+)\b")


def yaml_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*") if p.suffix in (".yaml", ".yml"))


@cache
def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def objects(under: Path = K8S) -> list[dict[str, Any]]:
    """Every Kubernetes object in the YAML files under ``under`` (not the
    kustomizations themselves)."""
    found = []
    for path in yaml_files():
        if not path.is_relative_to(under):
            continue
        for doc in documents(path):
            if doc.get("kind") not in ("Kustomization", "Component"):
                found.append(doc)
    return found


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [o for o in objects() if o["kind"] == kind]


def by_name(kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in of_kind(kind)}


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    """(workload name, pod spec) of every Deployment and Job."""
    for kind in ("Deployment", "Job"):
        for obj in of_kind(kind):
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


@cache
def env_names_read() -> frozenset[str]:
    """Environment variables the code reads (through ``Env`` or ``os.getenv``)."""
    names = set()
    for call in _calls():
        name = _first_str(call)
        if _callee(call) in _ENV_READERS and name is not None and _ENV_NAME.match(name):
            names.add(name)
    return frozenset(names)


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


def config_map_data() -> dict[str, str]:
    return dict(by_name("ConfigMap")["boxoffice-config"]["data"])
