"""Leader election behind one small interface.

``create_leadership(rt, name)`` gives a :class:`Leadership` whose ``run``
campaigns for the role ``name`` and runs the caller's work only while this
process leads. The backend comes from ``BOXOFFICE_LEADER_BACKEND``: a
Postgres session advisory lock (``postgres``, the default) or a Kubernetes
Lease (``kubernetes``); timings and identity are described in
``boxoffice/leader/_config.py``.

Leadership is not fencing: a leader that was paused (GC, SIGSTOP, a frozen
VM) may run on briefly after a successor has started. The epoch handed to
the work strictly increases with every term, so a store that remembers the
highest epoch it has seen can reject a deposed leader's writes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from boxoffice.config import ConfigError
from boxoffice.db import Migration, load_migrations
from boxoffice.leader._config import LeaderConfig, LeaderTimings, check_name, lease_name
from boxoffice.leader._elector import ElectionLock, Elector, LeaderMetrics
from boxoffice.leader._postgres import PostgresLock, advisory_keys
from boxoffice.runtime import Runtime


class Leadership(Protocol):
    async def run(self, lead: Callable[[int], Awaitable[None]]) -> None:
        """Campaign until cancelled; while this process leads, run lead(epoch) in a
        task and cancel it when leadership is lost. epoch strictly increases with
        every change of leader (a fencing token)."""


def create_leadership(rt: Runtime, name: str) -> Leadership:
    """The election for role ``name`` (e.g. ``"admitter"``) configured from
    ``rt.env``; raises ConfigError on bad settings."""
    check_name(name)
    config = LeaderConfig.from_env(rt.env)
    lock: ElectionLock
    if config.backend == "kubernetes":
        try:
            from boxoffice.leader._kubernetes import LeaseLock, api_configuration, default_namespace
        except ImportError as err:
            raise ConfigError(
                "BOXOFFICE_LEADER_BACKEND=kubernetes needs the Kubernetes client: pip install 'boxoffice[kubernetes]'"
            ) from err
        lock = LeaseLock(
            configuration=api_configuration(config.kube_api_url),
            namespace=default_namespace(config.namespace),
            lease_name=lease_name(name),
            identity=config.identity,
            lease_seconds=config.timings.lease_seconds,
        )
    else:
        lock = PostgresLock(
            database_url=config.database_url or rt.direct_database_url,
            name=name,
            identity=config.identity,
            timings=config.timings,
            session_bound_seconds=config.timings.session_bound_seconds,
        )
    return Elector(
        lock, name=name, identity=config.identity, timings=config.timings, metrics=LeaderMetrics.create(rt.registry)
    )


class Epochs(Protocol):
    """The election's own record of a role's latest term, where the epoch is
    made (a leader confirms its epoch against it before it writes)."""

    name: str

    async def start(self) -> None: ...

    async def current(self) -> int | None:
        """The epoch of the latest term; None before the first."""

    async def stop(self, grace_seconds: float) -> None: ...


def lease_epochs(rt: Runtime, name: str) -> Epochs:
    """The Kubernetes backend's record of role ``name``'s terms: its Lease's
    ``leaseTransitions`` (the Postgres backend's is the ``leader_epochs``
    row its lock's transaction increments)."""
    check_name(name)
    config = LeaderConfig.from_env(rt.env)
    try:
        from boxoffice.leader._kubernetes import LeaseEpochs, api_configuration, default_namespace
    except ImportError as err:
        raise ConfigError(
            "BOXOFFICE_LEADER_BACKEND=kubernetes needs the Kubernetes client: pip install 'boxoffice[kubernetes]'"
        ) from err
    return LeaseEpochs(
        configuration=api_configuration(config.kube_api_url),
        namespace=default_namespace(config.namespace),
        lease_name=lease_name(name),
    )


def migrations() -> list[Migration]:
    """The Postgres backend's table (``leader_epochs``); every process
    that elects a leader applies it with its own migrations."""
    return load_migrations("leader", "boxoffice.leader")


__all__ = [
    "ElectionLock",
    "Elector",
    "Epochs",
    "LeaderConfig",
    "LeaderMetrics",
    "LeaderTimings",
    "Leadership",
    "PostgresLock",
    "advisory_keys",
    "check_name",
    "create_leadership",
    "lease_epochs",
    "lease_name",
    "migrations",
]
