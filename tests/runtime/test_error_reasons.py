"""The published reasons are the only reasons the code can raise.

Every service package (a top-level ``*_svc`` directory) answers for the
``boxoffice.<service>.v1`` contract package; the runtime package
(``boxoffice``) answers for all of them. The scan reads the source, it imports
none of it, and walks the directories, so modules may move freely:

- every ``reason=`` given to an error (a ``BoxofficeError`` class, or a class
  or factory the scan cannot name, such as ``cls(...)``) must be a string
  literal published by the package's ``ErrorReason`` enum;
- a reason taken from a parameter makes its function a forwarder, and every
  call of the forwarder (by keyword or position) is checked the same way;
- a reason copied from another error (``err.reason``) was checked where that
  error was made;
- assignments to ``.reason``, UPPER_SNAKE ``"reason"`` entries of dict
  literals and the ``'reason', '...'`` pairs that SQL functions build are
  reasons too;
- any other expression fails the test, except the few pass-through sites
  listed in ``_PASS_THROUGH`` with why their reasons are published.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import boxoffice.errors as errors_module
from boxoffice.errors import (
    PUBLISHED_PACKAGES,
    SERVICE_REASONS_START,
    SHARED_REASONS,
    BoxofficeError,
    published_reasons,
    reason_enum,
    wire_reason,
)

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = "boxoffice"
CLI = "boxoffice_cli"
_FIRST_PARTY = re.compile(r"^(boxoffice|boxoffice_cli|gen|tests|bench|[a-z_]+_svc)(\.|$)")
_UPPER_SNAKE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_SQL_REASON = re.compile(r"'reason'\s*,\s*('(?P<literal>[^']*)'|(?P<other>[^\s,)]+))")

# Sites whose reason is not a literal but is published all the same:
# (package directory, enclosing function) -> why.
_PASS_THROUGH: dict[tuple[str, str], str] = {
    (RUNTIME, "from_rpc_error"): (
        "the reason a peer service put in its ErrorInfo (published by that peer's enum, which its own scan "
        "proves), or DEADLINE_EXCEEDED / UPSTREAM_FAILED when the peer sent none"
    ),
    ("payment_svc", "_stored"): (
        "replays the stored answer of an earlier call: an error this package raised, whose reason was checked "
        "where it was raised"
    ),
    ("booking_svc", "_stored_error"): (
        "replays a ConfirmHold answer stored before outcomes had names, with the reason the SQL of that time "
        "wrote (HOLD_NOT_FOUND, HOLD_ALREADY_CONFIRMED, HOLD_EXPIRED, AMOUNT_MISMATCH: all published)"
    ),
}


def service_packages() -> dict[str, str]:
    """Service package directory -> the contract package it answers for."""
    return {
        path.name: f"boxoffice.{path.name.removesuffix('_svc')}.v1"
        for path in sorted(ROOT.iterdir())
        if path.name.endswith("_svc") and (path / "__init__.py").is_file()
    }


def serves_calls(contract: str) -> bool:
    """Whether the contract package declares a gRPC service."""
    return any((ROOT / "proto" / contract.replace(".", "/")).glob("*_service.proto"))


@dataclass(frozen=True)
class Site:
    """One place a reason is set."""

    where: str
    reason: str | None  # the literal; None when the expression is not one
    expression: str
    function: str


@dataclass
class _Forwarder:
    """A function that passes one of its parameters on as a reason."""

    parameter: str
    index: int  # position among the arguments a caller passes (self excluded)


@dataclass
class PackageScan:
    """What the scan found in one package directory."""

    sites: list[Site] = field(default_factory=list)

    def literals(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for site in self.sites:
            if site.reason is not None:
                found.setdefault(site.reason, []).append(site.where)
        return found

    def dynamic(self) -> list[Site]:
        return [site for site in self.sites if site.reason is None]


def _error_class_names(trees: list[ast.Module]) -> set[str]:
    names: set[str] = set()
    pending: list[type[BoxofficeError]] = [BoxofficeError]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    grew = True
    while grew:
        grew = False
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in names:
                    if any(_final_name(base) in names for base in node.bases):
                        names.add(node.name)
                        grew = True
    return names


def _final_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _external_names(tree: ast.Module) -> set[str]:
    """Names a module imports from outside the project (their calls make no
    boxoffice error)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not _FIRST_PARTY.match(node.module):
                names.update(alias.asname or alias.name for alias in node.names)
    return names


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if args and args[0] in ("self", "cls"):
        args = args[1:]
    return [*args, *(a.arg for a in function.args.kwonlyargs)]


@dataclass
class _Module:
    package: str
    path: Path
    tree: ast.Module
    external: set[str]
    parents: dict[ast.AST, ast.AST]

    def where(self, node: ast.AST) -> str:
        return f"{self.path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        current = self.parents.get(node)
        while current is not None:
            if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef):
                return current
            current = self.parents.get(current)
        return None


def _module(package: str, path: Path, source: str) -> _Module:
    tree = ast.parse(source, filename=str(path))
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    return _Module(package, path, tree, _external_names(tree), parents)


def _load(packages: list[str]) -> list[_Module]:
    return [
        _module(package, path, path.read_text(encoding="utf-8"))
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
    ]


class _Scanner:
    def __init__(self, modules: list[_Module]) -> None:
        self.modules = modules
        self.error_classes = _error_class_names([m.tree for m in modules])
        self.functions = {
            node.name
            for m in modules
            for node in ast.walk(m.tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        self.forwarders: dict[str, list[_Forwarder]] = {}
        self.scans: dict[str, PackageScan] = {m.package: PackageScan() for m in modules}
        self._seen: set[tuple[str, int, int]] = set()

    def run(self) -> dict[str, PackageScan]:
        # Forwarders are found while sites are classified; repeat until no
        # new forwarder appears (a forwarder may call another).
        while True:
            before = sum(len(f) for f in self.forwarders.values())
            for module in self.modules:
                self._scan(module)
            if sum(len(f) for f in self.forwarders.values()) == before:
                return self.scans

    def _scan(self, module: _Module) -> None:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call):
                self._call(module, node)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if node.value is not None and any(isinstance(t, ast.Attribute) and t.attr == "reason" for t in targets):
                    self._value(module, node, node.value)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "reason":
                        if isinstance(value, ast.Constant) and isinstance(value.value, str):
                            if _UPPER_SNAKE.match(value.value):
                                self._value(module, node, value)

    def _call(self, module: _Module, call: ast.Call) -> None:
        callee = _final_name(call.func)
        for keyword in call.keywords:
            if keyword.arg == "reason" and self._makes_error(module, call.func, callee):
                self._value(module, call, keyword.value)
        for forwarder in self.forwarders.get(callee or "", []):
            for keyword in call.keywords:
                if keyword.arg == forwarder.parameter:
                    self._value(module, call, keyword.value)
            if forwarder.index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args):
                self._value(module, call, call.args[forwarder.index])

    def _makes_error(self, module: _Module, func: ast.expr, callee: str | None) -> bool:
        if callee is None:
            return True  # a factory's result or a table lookup: assume an error class
        if callee in self.error_classes:
            return True
        if callee in module.external or callee[:1].isupper():
            return False  # a class that is not an error (a record, a third party's exception)
        # A function of the project takes a reason only to forward it (its
        # calls are then checked as a forwarder's); any other callable (a
        # variable such as ``cls``) is assumed to make an error.
        return callee not in self.functions

    def _value(self, module: _Module, site: ast.AST, value: ast.expr) -> None:
        key = (str(module.path), id(site), id(value))
        if key in self._seen:
            return
        self._seen.add(key)
        function = module.function_of(site)
        name = function.name if function is not None else "<module>"
        scan = self.scans[module.package]
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            scan.sites.append(Site(module.where(site), value.value, ast.unparse(value), name))
        elif isinstance(value, ast.IfExp):
            self._value(module, value.body, value.body)
            self._value(module, value.orelse, value.orelse)
        elif isinstance(value, ast.Attribute) and value.attr == "reason":
            pass  # copied from an error that was checked where it was made
        elif isinstance(value, ast.Name) and function is not None and value.id in _parameters(function):
            forwarders = self.forwarders.setdefault(function.name, [])
            params = _parameters(function)
            if all(f.parameter != value.id for f in forwarders):
                forwarders.append(_Forwarder(value.id, params.index(value.id)))
        else:
            scan.sites.append(Site(module.where(site), None, ast.unparse(value), name))


def _sql_sites(package: str) -> Iterator[Site]:
    for path in sorted((ROOT / package).rglob("*.sql")):
        text = path.read_text(encoding="utf-8")
        for match in _SQL_REASON.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            where = f"{path.relative_to(ROOT)}:{line}"
            yield Site(where, match.group("literal"), match.group(0), "<sql>")


@pytest.fixture(scope="module")
def scans() -> dict[str, PackageScan]:
    packages = [RUNTIME, *([CLI] if (ROOT / CLI).is_dir() else []), *service_packages()]
    found = _Scanner(_load(packages)).run()
    for package in service_packages():
        found[package].sites.extend(_sql_sites(package))
    return found


def test_every_service_package_has_a_published_enum_and_back() -> None:
    assert sorted(service_packages().values()) == sorted(PUBLISHED_PACKAGES)


def test_the_shared_reasons_are_the_same_in_every_package() -> None:
    shared = {
        package: {
            (value.number, wire_reason(value.name))
            for value in reason_enum(package).values
            if 0 < value.number < SERVICE_REASONS_START
        }
        for package in PUBLISHED_PACKAGES
    }
    first = shared[PUBLISHED_PACKAGES[0]]
    assert all(values == first for values in shared.values()), shared
    assert {name for _, name in first} == SHARED_REASONS


def test_a_service_reason_is_not_also_a_shared_reason() -> None:
    for package in PUBLISHED_PACKAGES:
        own = {wire_reason(v.name) for v in reason_enum(package).values if v.number >= SERVICE_REASONS_START}
        assert not own & SHARED_REASONS, (package, own & SHARED_REASONS)


def test_the_scan_finds_the_reasons_it_must(scans: dict[str, PackageScan]) -> None:
    """The scan is not vacuous: reasons known to be raised (through a
    keyword, a forwarder and a helper) are found where they are."""
    runtime = scans[RUNTIME].literals()
    assert {"FIELD_REQUIRED", "INVALID_FIELD", "TOKEN_EXPIRED", "DEADLINE_EXCEEDED"} <= set(runtime)
    if "payment_svc" in scans:
        # raised through a helper that takes the reason as its first argument
        assert "WEBHOOK_SIGNATURE_INVALID" in scans["payment_svc"].literals()
    for package, contract in service_packages().items():
        # A package that serves calls answers some; one that serves none yet
        # (the mailer, a stream consumer) may raise nothing.
        if serves_calls(contract):
            assert scans[package].literals(), f"no reason found in {package}"
    assert {"queue_svc", "booking_svc", "payment_svc"} <= {p for p, c in service_packages().items() if serves_calls(c)}


def test_the_runtime_raises_only_shared_reasons(scans: dict[str, PackageScan]) -> None:
    stray = {r: w for r, w in scans[RUNTIME].literals().items() if r not in SHARED_REASONS}
    assert not stray, f"runtime reasons every package must publish (numbers below 100): {stray}"


def test_each_service_raises_only_its_published_reasons(scans: dict[str, PackageScan]) -> None:
    for package, contract in service_packages().items():
        published = published_reasons(contract)
        stray = {r: w for r, w in scans[package].literals().items() if r not in published}
        assert not stray, f"{package} raises reasons {contract}.ErrorReason does not publish: {stray}"


def test_the_command_raises_only_published_reasons(scans: dict[str, PackageScan]) -> None:
    if CLI not in scans:
        pytest.skip("no command package")
    every = frozenset().union(*(published_reasons(p) for p in PUBLISHED_PACKAGES))
    stray = {r: w for r, w in scans[CLI].literals().items() if r not in every}
    assert not stray, stray


def test_no_reason_is_computed_outside_the_known_pass_throughs(scans: dict[str, PackageScan]) -> None:
    stray = [
        f"{site.where} ({site.function}): reason={site.expression}"
        for package, scan in scans.items()
        for site in scan.dynamic()
        if (package, site.function) not in _PASS_THROUGH
    ]
    assert not stray, "reasons that are not literals of the enum:\n" + "\n".join(stray)


def test_every_pass_through_names_a_function_that_exists() -> None:
    """A pass-through outlives its function only by mistake: the list stays
    the list of sites that really compute a reason."""
    defined: dict[str, set[str]] = {}
    for package, _function in _PASS_THROUGH:
        if package not in defined:
            names: set[str] = set()
            for path in (ROOT / package).rglob("*.py"):
                tree = ast.parse(path.read_text())
                names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
            defined[package] = names
    missing = [key for key in _PASS_THROUGH if key[1] not in defined[key[0]]]
    assert not missing, missing


def test_the_scan_rejects_what_it_must() -> None:
    """A scan over a made-up module: literals, forwarders and copies pass
    through; a computed reason is caught."""
    source = """
from boxoffice.errors import NotFound
from kubernetes_asyncio.client import ApiException

def unpublished(x):
    return NotFound("m", reason="NOT_A_PUBLISHED_REASON")

def forward(reason, message):
    return NotFound(message, reason=reason)

def caller():
    raise forward("FORWARDED_REASON", "m")

def copied(err):
    return NotFound("m", reason=err.reason)

def computed(code):
    return NotFound("m", reason=code.upper())

def third_party():
    raise ApiException(status=409, reason="not a boxoffice reason")

class Payments:
    def refund(self, *, reason):
        return reason

def not_an_error(payments):
    return payments.refund(reason="free text")

def by_factory(cls):
    return cls("m", reason="FROM_A_FACTORY")
"""
    scan = _Scanner([_module("fake_svc", ROOT / "fake_svc" / "m.py", source)]).run()["fake_svc"]
    assert set(scan.literals()) == {"NOT_A_PUBLISHED_REASON", "FORWARDED_REASON", "FROM_A_FACTORY"}
    assert [site.expression for site in scan.dynamic()] == ["code.upper()"]


def test_the_registry_reads_the_generated_enums() -> None:
    assert errors_module.published_reasons("boxoffice.booking.v1") >= {"SEAT_UNAVAILABLE", "SOLD_OUT"}
    assert errors_module.published_reasons("boxoffice.test.v1") == frozenset()
    assert "UNSPECIFIED" not in errors_module.published_reasons("boxoffice.queue.v1")
