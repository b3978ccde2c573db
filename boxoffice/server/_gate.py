"""The authorization table enforced on every call: who the caller is, and
whether :data:`boxoffice.access.POLICY` lets them make the call; a refusal
counted and logged at most once a minute per method and role."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import descriptor_pool
from prometheus_client import CollectorRegistry, Counter

from boxoffice import access
from boxoffice.caller import Caller
from boxoffice.errors import PermissionDenied
from boxoffice.tls import CallerResolver

_log = logging.getLogger("boxoffice.server")


def split_method(full_method: str) -> tuple[str, str]:
    _, _, rest = full_method.partition("/")
    service, _, method = rest.partition("/")
    return service, method


# The ``role`` label of a caller with no identity of this mesh.
_NO_ROLE = "none"
_REFUSAL_LOG_INTERVAL_SECONDS = 60.0


class Gate:
    """The authorization table (``policy``: :data:`boxoffice.access.POLICY`
    but in tests of the runtime itself), enforced: who the caller is, and
    whether the table lets them make the call."""

    def __init__(
        self,
        resolver: CallerResolver,
        refused: Counter,
        *,
        policy: Mapping[str, frozenset[str]] = access.POLICY,
    ) -> None:
        self._resolver = resolver
        self._refused = refused
        self._policy = policy
        self._logged: dict[tuple[str, str], float] = {}

    @staticmethod
    def refused_counter(registry: CollectorRegistry) -> Counter:
        """``boxoffice_grpc_calls_refused_total``, once per registry."""
        return Counter(
            "boxoffice_grpc_calls_refused",
            "Calls refused by the authorization table before doing anything, by caller role "
            '("none": no identity of this mesh).',
            ("grpc_service", "grpc_method", "role"),
            registry=registry,
        )

    def label_services(self, service_names: Sequence[str]) -> None:
        """Creates the refusal series of every method of ``service_names``
        for every role, so that a rate over them exists before the first
        refusal."""
        pool = descriptor_pool.Default()
        for name in service_names:
            prefix = f"/{name}/"
            methods = {m[len(prefix) :] for m in self._policy if m.startswith(prefix)}
            try:
                methods.update(m.name for m in pool.FindServiceByName(name).methods)
            except KeyError:
                pass  # a service of generic handlers: the table's methods
            for method in sorted(methods):
                for role in (*access.ROLES, _NO_ROLE):
                    self._refused.labels(name, method, role)

    def open_to_anyone(self, full_method: str) -> bool:
        return access.ANYONE in self._policy.get(full_method, frozenset())

    def check(self, full_method: str) -> Callable[[grpc.aio.ServicerContext[Any, Any]], Caller]:
        """The check of ``full_method``'s calls: it answers the caller, or
        raises PermissionDenied (a method missing from the table answers
        nobody)."""
        roles = self._policy.get(full_method, frozenset())
        resolve = self._resolver.resolve
        if access.ANYONE in roles:
            return resolve
        service, method = split_method(full_method)

        def check(context: grpc.aio.ServicerContext[Any, Any]) -> Caller:
            who = resolve(context)
            if who.role is not None and who.role in roles:
                return who
            raise self._refuse(full_method, service, method, who)

        return check

    def _refuse(self, full_method: str, service: str, method: str, who: Caller) -> PermissionDenied:
        role = who.role or _NO_ROLE
        self._refused.labels(service, method, role).inc()
        now = time.monotonic()
        key = (full_method, role)
        if now - self._logged.get(key, -_REFUSAL_LOG_INTERVAL_SECONDS) >= _REFUSAL_LOG_INTERVAL_SECONDS:
            self._logged[key] = now
            _log.warning(
                "call refused",
                extra={"grpc_service": service, "grpc_method": method, "role": role, "identity": who.identity},
            )
        if who.role is None:
            return PermissionDenied(
                f"{full_method} needs a caller identity of this mesh",
                reason="CALLER_UNKNOWN",
                metadata={"method": full_method},
            )
        return PermissionDenied(
            f"{full_method} is not allowed to role {who.role!r}",
            reason="CALLER_NOT_ALLOWED",
            metadata={"method": full_method, "role": who.role},
        )
