"""The Kubernetes backend: a ``coordination.k8s.io/v1`` Lease.

The algorithm is client-go's ``tools/leaderelection``: a candidate reads the
Lease; it may take it when nobody holds it, when it names this candidate, or
when its record has not changed for ``leaseDurationSeconds`` as timed on this
candidate's own clock (so clock skew between nodes does not matter). Every
write carries the ``resourceVersion`` that was read, so of two candidates
racing for one expired Lease the API server lets exactly one win (the other
gets 409 Conflict). ``leaseTransitions`` counts terms and is the epoch: each
acquisition writes the count read plus one.
"""

from __future__ import annotations

import datetime
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import load_incluster_config
from kubernetes_asyncio.config.config_exception import ConfigException

from boxoffice import deadline
from boxoffice.config import ConfigError
from boxoffice.errors import Unavailable

_log = logging.getLogger("boxoffice.leader")

_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_NOT_FOUND = 404
_CONFLICT = 409


def default_namespace(configured: str | None) -> str:
    """``POD_NAMESPACE`` when set, else the pod's service-account namespace,
    else ``default``."""
    if configured:
        return configured
    try:
        found = _SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:
        found = ""
    return found or "default"


def api_configuration(api_url: str | None) -> client.Configuration:
    """The API server of the pod's cluster (service-account token, refreshed),
    or ``api_url`` without credentials (``kubectl proxy``, tests)."""
    configuration = client.Configuration()
    if api_url is not None:
        configuration.host = api_url.rstrip("/")
        return configuration
    try:
        cast(Any, load_incluster_config)(client_configuration=configuration)
    except ConfigException as err:
        raise ConfigError(
            f"BOXOFFICE_LEADER_BACKEND=kubernetes needs a pod's service account or BOXOFFICE_LEADER_KUBE_API_URL ({err})"
        ) from None
    return configuration


def _micro_time(moment: datetime.datetime) -> str:
    """RFC 3339 with exactly six fractional digits (a MicroTime)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class _Record:
    """What a candidate reads from the Lease."""

    resource_version: str
    holder: str
    lease_seconds: int
    transitions: int
    acquire_time: datetime.datetime | None
    labels: dict[str, str] | None
    annotations: dict[str, str] | None

    @classmethod
    def of(cls, lease: client.V1Lease) -> _Record:
        meta = lease.metadata
        spec = lease.spec
        return cls(
            resource_version=str(meta.resource_version or "") if meta is not None else "",
            holder=(spec.holder_identity or "") if spec is not None else "",
            lease_seconds=int(spec.lease_duration_seconds or 0) if spec is not None else 0,
            transitions=int(spec.lease_transitions or 0) if spec is not None else 0,
            acquire_time=spec.acquire_time if spec is not None else None,
            labels=dict(meta.labels) if meta is not None and meta.labels else None,
            annotations=dict(meta.annotations) if meta is not None and meta.annotations else None,
        )


class LeaseLock:
    """An :class:`ElectionLock` on a Lease."""

    def __init__(
        self,
        *,
        configuration: client.Configuration,
        namespace: str,
        lease_name: str,
        identity: str,
        lease_seconds: float,
    ) -> None:
        self._configuration = configuration
        self._namespace = namespace
        self._lease_name = lease_name
        self._identity = identity
        self._lease_seconds = max(1, math.ceil(lease_seconds))
        self._api_client: client.ApiClient | None = None
        self._api: client.CoordinationV1Api | None = None
        # The latest record read, and when (this process's monotonic clock)
        # it was first seen: the lease runs out on this clock.
        self._observed: _Record | None = None
        self._observed_at = 0.0
        self._epoch: int | None = None
        # A write that claimed the Lease may have landed without an answer.
        self._may_hold = False

    def _coordination(self) -> client.CoordinationV1Api:
        if self._api is None:
            self._api_client = client.ApiClient(configuration=self._configuration)
            self._api = client.CoordinationV1Api(api_client=self._api_client)
        return self._api

    def _observe(self, record: _Record) -> None:
        if self._observed is None or record.resource_version != self._observed.resource_version:
            self._observed = record
            self._observed_at = time.monotonic()

    def _expired(self, record: _Record) -> bool:
        return time.monotonic() > self._observed_at + record.lease_seconds

    async def _read(self) -> _Record | None:
        try:
            lease = await self._coordination().read_namespaced_lease(
                self._lease_name, self._namespace, _request_timeout=deadline.remaining()
            )
        except ApiException as err:
            if err.status == _NOT_FOUND:
                return None
            raise
        record = _Record.of(lease)
        self._observe(record)
        return record

    def _body(
        self,
        *,
        holder: str | None,
        lease_seconds: int,
        transitions: int,
        acquired: datetime.datetime,
        renewed: datetime.datetime,
        previous: _Record | None,
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self._lease_name, "namespace": self._namespace}
        if previous is not None:
            metadata["resourceVersion"] = previous.resource_version
            if previous.labels:
                metadata["labels"] = previous.labels
            if previous.annotations:
                metadata["annotations"] = previous.annotations
        spec: dict[str, Any] = {
            "leaseDurationSeconds": lease_seconds,
            "leaseTransitions": transitions,
            "acquireTime": _micro_time(acquired),
            "renewTime": _micro_time(renewed),
        }
        if holder:
            spec["holderIdentity"] = holder
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    async def _write(self, lease: dict[str, Any], *, create: bool) -> _Record | None:
        """The record written, or None when another write came first (409)."""
        api = self._coordination()
        # A plain dict is sent as it is (the models would print a MicroTime
        # without its fraction when it falls on a whole second).
        body: Any = lease
        try:
            if create:
                written = await api.create_namespaced_lease(
                    self._namespace, body, _request_timeout=deadline.remaining()
                )
            else:
                written = await api.replace_namespaced_lease(
                    self._lease_name, self._namespace, body, _request_timeout=deadline.remaining()
                )
        except ApiException as err:
            if err.status == _CONFLICT:
                return None
            raise
        record = _Record.of(written)
        self._observe(record)
        return record

    async def try_acquire(self) -> int | None:
        self._epoch = None
        current = await self._read()
        if current is not None and current.holder and current.holder != self._identity and not self._expired(current):
            return None
        now = datetime.datetime.now(datetime.UTC)
        # Every term gets the next count, even this candidate's own lease
        # taken again after a restart: epochs never repeat.
        epoch = (current.transitions if current is not None else 0) + 1
        body = self._body(
            holder=self._identity,
            lease_seconds=self._lease_seconds,
            transitions=epoch,
            acquired=now,
            renewed=now,
            previous=current,
        )
        self._may_hold = True
        written = await self._write(body, create=current is None)
        if written is None:
            return None
        self._epoch = epoch
        return epoch

    async def renew(self) -> bool:
        epoch = self._epoch
        if epoch is None:
            return False
        current = await self._read()
        if current is None or current.holder != self._identity or current.transitions != epoch:
            self._epoch = None
            return False
        now = datetime.datetime.now(datetime.UTC)
        body = self._body(
            holder=self._identity,
            lease_seconds=self._lease_seconds,
            transitions=epoch,
            acquired=current.acquire_time or now,
            renewed=now,
            previous=current,
        )
        if await self._write(body, create=False) is None:
            # Someone wrote in between: the next read says whether it was a
            # new leader. Until then the renewal is merely unconfirmed.
            raise ApiException(status=_CONFLICT, reason="lease changed during renewal")
        return True

    async def release(self) -> None:
        """Hand the Lease back (holder cleared, one-second duration), as
        client-go's ReleaseOnCancel does; only if it still names this
        candidate, and only with the version read (never over a newer term)."""
        self._epoch = None
        if not self._may_hold:
            return
        current = await self._read()
        if current is None or current.holder != self._identity:
            self._may_hold = False
            return
        now = datetime.datetime.now(datetime.UTC)
        body = self._body(
            holder=None,
            lease_seconds=1,
            transitions=current.transitions,
            acquired=now,
            renewed=now,
            previous=current,
        )
        await self._write(body, create=False)
        self._may_hold = False

    async def close(self) -> None:
        try:
            await self.release()
        except Exception as err:
            _log.warning("could not release the lease: %s", str(err) or type(err).__name__)
        finally:
            api_client, self._api_client, self._api = self._api_client, None, None
            if api_client is not None:
                await api_client.close()


class LeaseEpochs:
    """The epoch of a role's latest term as its Lease records it
    (``leaseTransitions``): what a leader confirms its own epoch against
    before it writes, so that a store's lost copy of the fence (a Redis
    failover) cannot let a deposed leader in. One read of the Lease each
    time; a Lease that cannot be read is UNAVAILABLE (the write waits)."""

    name = "lease-epochs"

    def __init__(self, *, configuration: client.Configuration, namespace: str, lease_name: str) -> None:
        self._configuration = configuration
        self._namespace = namespace
        self._lease_name = lease_name
        self._api_client: client.ApiClient | None = None

    async def start(self) -> None:
        return None

    async def current(self) -> int | None:
        if self._api_client is None:
            self._api_client = client.ApiClient(configuration=self._configuration)
        api = client.CoordinationV1Api(api_client=self._api_client)
        try:
            lease = await api.read_namespaced_lease(
                self._lease_name, self._namespace, _request_timeout=deadline.remaining()
            )
        except ApiException as err:
            if err.status == _NOT_FOUND:
                return None
            raise Unavailable(
                f"cannot read the lease {self._lease_name}: HTTP {err.status}", reason="UPSTREAM_FAILED"
            ) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise Unavailable(
                f"cannot read the lease {self._lease_name}: {type(err).__name__}", reason="UPSTREAM_FAILED"
            ) from None
        return _Record.of(lease).transitions

    async def stop(self, grace_seconds: float) -> None:
        api_client, self._api_client = self._api_client, None
        if api_client is not None:
            await api_client.close()
