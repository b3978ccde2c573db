"""Leader-election settings from the environment.

| variable | default | meaning |
| --- | --- | --- |
| ``BOXOFFICE_LEADER_BACKEND`` | ``postgres`` | ``postgres`` (advisory lock) or ``kubernetes`` (Lease) |
| ``BOXOFFICE_LEADER_LEASE_SECONDS`` | 15 | how long a silent leader is presumed alive |
| ``BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS`` | 10 | a leader that cannot confirm for this long steps down |
| ``BOXOFFICE_LEADER_RETRY_SECONDS`` | 2 | period of renewals and of a standby's attempts |
| ``POD_NAME`` | hostname-pid | this candidate's identity |
| ``POD_NAMESPACE`` | the service account's | namespace of the Lease (kubernetes) |
| ``BOXOFFICE_LEADER_KUBE_API_URL`` | in-cluster | API server URL without auth, e.g. ``kubectl proxy`` (kubernetes) |
| ``BOXOFFICE_LEADER_DATABASE_URL`` | ``DATABASE_DIRECT_URL``, else ``DATABASE_URL`` | a direct (session-mode) Postgres URL for the election alone |
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

from boxoffice.config import ConfigError, Env

BACKENDS = ("postgres", "kubernetes")

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
_MAX_IDENTITY = 128


def check_name(name: str) -> str:
    """An elected role's name: lowercase letters, digits and dashes (it
    becomes part of a Kubernetes object name)."""
    if not _NAME.match(name):
        raise ValueError(f"leader election name {name!r} must match {_NAME.pattern}")
    return name


@dataclass(frozen=True, slots=True)
class LeaderTimings:
    """client-go's three durations.

    A standby takes over a lease nobody renewed for ``lease_seconds``; a
    leader that could not confirm its leadership for
    ``renew_deadline_seconds`` stops leading (strictly before a standby may
    take over); renewals and a standby's attempts happen every
    ``retry_seconds``.
    """

    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not 0.05 <= self.retry_seconds <= 600:
            raise ConfigError(f"BOXOFFICE_LEADER_RETRY_SECONDS={self.retry_seconds} must be between 0.05 and 600")
        if self.renew_deadline_seconds <= 1.2 * self.retry_seconds:
            raise ConfigError(
                f"BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS={self.renew_deadline_seconds} must be more than 1.2 x "
                f"BOXOFFICE_LEADER_RETRY_SECONDS ({self.retry_seconds})"
            )
        if self.lease_seconds <= self.renew_deadline_seconds:
            raise ConfigError(
                f"BOXOFFICE_LEADER_LEASE_SECONDS={self.lease_seconds} must be more than "
                f"BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS ({self.renew_deadline_seconds})"
            )
        if self.lease_seconds > 3600:
            raise ConfigError(f"BOXOFFICE_LEADER_LEASE_SECONDS={self.lease_seconds} must be at most 3600")

    @property
    def session_bound_seconds(self) -> float:
        """How long the database keeps a silent leader's session (and so its
        lock): after the leader's own renew deadline, so that it has stopped
        leading first, and before the lease ends, so that a standby can take
        over within the lease."""
        return (self.renew_deadline_seconds + self.lease_seconds) / 2


@dataclass(frozen=True, slots=True)
class LeaderConfig:
    """Which backend, who this candidate is, and the timings."""

    backend: str
    identity: str
    timings: LeaderTimings
    namespace: str | None
    kube_api_url: str | None
    database_url: str | None

    @classmethod
    def from_env(cls, env: Env) -> LeaderConfig:
        backend = env.choice("BOXOFFICE_LEADER_BACKEND", "postgres", BACKENDS)
        timings = LeaderTimings(
            lease_seconds=env.number("BOXOFFICE_LEADER_LEASE_SECONDS", 15.0),
            renew_deadline_seconds=env.number("BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS", 10.0),
            retry_seconds=env.number("BOXOFFICE_LEADER_RETRY_SECONDS", 2.0),
        )
        if backend == "kubernetes" and (timings.lease_seconds != int(timings.lease_seconds)):
            raise ConfigError(
                f"BOXOFFICE_LEADER_LEASE_SECONDS={timings.lease_seconds} must be a whole number of seconds "
                "for the kubernetes backend (a Lease counts whole seconds)"
            )
        identity = env.optional_str("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        if len(identity) > _MAX_IDENTITY or any(ord(ch) < 0x20 for ch in identity):
            raise ConfigError(f"POD_NAME must be at most {_MAX_IDENTITY} printable characters")
        kube_api_url = env.optional_str("BOXOFFICE_LEADER_KUBE_API_URL")
        if kube_api_url is not None and not kube_api_url.startswith(("http://", "https://")):
            raise ConfigError(f"BOXOFFICE_LEADER_KUBE_API_URL={kube_api_url!r} must be an http(s) URL")
        return cls(
            backend=backend,
            identity=identity,
            timings=timings,
            namespace=env.optional_str("POD_NAMESPACE"),
            kube_api_url=kube_api_url,
            database_url=env.optional_str("BOXOFFICE_LEADER_DATABASE_URL"),
        )


def lease_name(role: str) -> str:
    """The Lease a role is elected on (RBAC in k8s/ grants exactly this name)."""
    return f"boxoffice-{role}"
