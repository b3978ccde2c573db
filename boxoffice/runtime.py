"""The composition root's toolbox: what every service's ``build`` receives.

A :class:`Runtime` owns the process-wide dependencies (configuration, clock,
metrics registry, token signer, drain, the Postgres pool and the Redis
client, the process's TLS identity and its authorization gate) and hands them
to the services' constructors: a service's server comes from
:meth:`Runtime.grpc_server` and its clients of other services from
:meth:`Runtime.channel`, both as the process's (or in ``boxoffice up`` the
component's) own identity. Nothing here is global:
a test builds its own Runtime against its own stores and ports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import prometheus_client
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from boxoffice.clock import Clock, SystemClock
from boxoffice.config import ConfigError, Env, ServerConfig, StoreConfig, TlsConfig, TokenConfig
from boxoffice.db import Migration, PoolComponent, create_pool
from boxoffice.lifecycle import Component
from boxoffice.metrics import GrpcServerMetrics
from boxoffice.redis import RedisComponent, create_client
from boxoffice.server import Drain, Gate, GrpcServer, Registration
from boxoffice.tls import CallerResolver, CertFiles, ClientChannel, namespaces_of, server_credentials
from boxoffice.tracing import Tracing, TracingConfig
from boxoffice.wire import StreamBudget

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]


class Runtime:
    """Process-wide dependencies, built once in the composition root."""

    def __init__(
        self,
        *,
        env: Env,
        server: ServerConfig,
        store: StoreConfig,
        database_url: str,
        redis_url: str,
        clock: Clock,
        registry: CollectorRegistry,
        tokens: TokenConfig,
        tls: TlsConfig,
        tracing: Tracing | None = None,
    ) -> None:
        self.env = env
        self.server = server
        self.store = store
        self.database_url = database_url
        self.redis_url = redis_url
        self.clock = clock
        self.registry = registry
        # No `_created` series: they double every counter's series and no
        # dashboard or rule reads them (prometheus_client's switch is global).
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        # Follows BOXOFFICE_TOKEN_KEYS(_FILE): a rotated key file needs no restart.
        self.token_signer = tokens.signer(clock)
        self.drain = Drain()
        # The server streams this process keeps open, over all its servers.
        self.streams = StreamBudget(server.max_open_streams)
        self.grpc_metrics = GrpcServerMetrics.create(registry)
        self.tls = tls
        # The process's one tracer provider (a test may replace it before it
        # builds the services: servers and channels read it when made).
        self.tracing = tracing or Tracing.off()
        source = "tls" if tls.enabled else (tls.mesh_identity or "none")
        self._trusted: frozenset[str] | None = frozenset(tls.trust_namespaces) if tls.trust_namespaces else None
        # Who called: an identity of the trust domain in a trusted namespace.
        self.callers = CallerResolver(source, tls.trust_domain, namespaces=self._trusted_namespaces)
        self.gate = Gate(self.callers, Gate.refused_counter(registry))
        # `boxoffice up` (and tests) give each component its own identity;
        # otherwise the process has one, from the BOXOFFICE_TLS_*_FILE settings.
        self.identities: dict[str, CertFiles] = {}
        self._health_port_given = False
        self._pool: Pool | None = None
        self._redis: aioredis.Redis | None = None
        self._infrastructure: list[Component] = []
        # `boxoffice up` serves each service on its own port in one process.
        self.grpc_ports: dict[str, int] = {}

    @classmethod
    def from_env(
        cls,
        env: Env,
        *,
        database_url: str,
        redis_url: str,
        default_grpc_port: int = 0,
        default_health_port: int | None = None,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
        role: str | None = None,
    ) -> Runtime:
        """The one way a process, a test or a benchmark builds its Runtime:
        every setting read (and validated) from ``env``; a test passes its own
        clock and registry. ``role`` (``<component>-<role>``, as
        :data:`boxoffice.config.POOL_BUDGETS` names them) is what the process
        runs, when it runs one role: it sets the pool's budget and the name
        of its connections."""
        return cls(
            env=env,
            server=ServerConfig.from_env(env, default_grpc_port=default_grpc_port),
            store=StoreConfig.from_env(env, role=role),
            database_url=database_url,
            redis_url=redis_url,
            clock=clock or SystemClock(),
            registry=registry or CollectorRegistry(),
            tokens=TokenConfig.from_env(env),
            tls=TlsConfig.from_env(env, default_health_port=default_health_port),
            # service.name: the component and role (``boxoffice`` for `boxoffice up`'s one process).
            tracing=Tracing.from_config(TracingConfig.from_env(env), role or "boxoffice"),
        )

    def pool(self) -> Pool:
        """The process's Postgres pool (opened with the infrastructure)."""
        if self._pool is None:
            self._pool = create_pool(
                self.database_url,
                min_size=self.store.db_pool_min,
                max_size=self.store.db_pool_max,
                name="boxoffice",
                prepared_statements=self.store.db_prepared_statements,
                application_name=self.store.db_application_name,
            )
            self._infrastructure.append(PoolComponent(self._pool, check_interval_seconds=self.store.db_check_seconds))
        return self._pool

    @property
    def direct_database_url(self) -> str:
        """Postgres without a transaction pooler between, for session
        advisory locks (``DATABASE_DIRECT_URL``, else the database URL)."""
        return self.store.database_direct_url or self.database_url

    def redis(self) -> aioredis.Redis:
        """The process's Redis client (checked with the infrastructure).

        With ``BOXOFFICE_REDIS_CLUSTER=true`` it is a
        ``redis.asyncio.RedisCluster`` that finds the cluster from the node
        ``REDIS_URL`` names: it speaks the same commands (every one on one
        slot's keys), so it is typed as the plain client; the batcher, which
        routes pipelines itself, tells them apart."""
        if self._redis is None:
            client = create_client(self.redis_url, cluster=self.env.flag("BOXOFFICE_REDIS_CLUSTER", False))
            self._redis = cast(aioredis.Redis, client)
            self._infrastructure.append(RedisComponent(self._redis))
        return self._redis

    def infrastructure(self) -> list[Component]:
        """Pools and clients asked for so far; they start before the services
        and stop after them (the tracer provider, when it records, first and
        last)."""
        return [self.tracing, *self._infrastructure] if self.tracing.enabled else list(self._infrastructure)

    def grpc_server(self, name: str, services: Sequence[Registration], *, min_message_bytes: int = 0) -> GrpcServer:
        """A server for component ``name`` on its port (``grpc_ports`` when
        set for it, else the process's configured port); it takes requests
        of at least ``min_message_bytes`` whatever BOXOFFICE_MAX_MESSAGE_BYTES
        says (a service whose contract allows large requests)."""
        port = self.grpc_ports.get(name)
        config = self.server if port is None else dataclasses.replace(self.server, grpc_port=port)
        if config.max_message_bytes < min_message_bytes:
            config = dataclasses.replace(config, max_message_bytes=min_message_bytes)
        files = self.identity(name)
        try:
            credentials = None if files is None else server_credentials(files)
        except (OSError, ValueError) as err:
            raise ConfigError(f"the TLS certificate of {name} cannot be used: {err}") from None
        # One plaintext health port per process: the first server's.
        health_port = None if self._health_port_given else self.tls.health_port
        self._health_port_given = True
        return GrpcServer(
            name=name,
            config=config,
            metrics=self.grpc_metrics,
            services=services,
            drain=self.drain,
            gate=self.gate,
            credentials=credentials,
            health_port=health_port,
            streams=self.streams,
            tracing=self.tracing,
        )

    def _trusted_namespaces(self) -> frozenset[str] | None:
        """BOXOFFICE_TRUST_NAMESPACES, else the namespaces of the process's
        own certificates (read once they are known; none trusted before).
        Behind a sidecar (TLS off) without the setting: any namespace of
        the trust domain (the mesh's own policies pin it)."""
        if self._trusted is not None:
            return self._trusted
        if not self.tls.enabled:
            return None
        files = [files.cert for files in self.identities.values()]
        if not files and self.tls.cert_file is not None:
            files = [Path(self.tls.cert_file)]
        found = namespaces_of(files, self.tls.trust_domain)
        if found:
            self._trusted = found
        return found

    def identity(self, component: str) -> CertFiles | None:
        """The certificate files ``component`` serves and dials with (None
        with TLS off); ConfigError when TLS is on and there are none."""
        if not self.tls.enabled:
            return None
        files = self.identities.get(component)
        if files is not None:
            return files
        self.tls.require_files()
        return CertFiles(
            ca=Path(str(self.tls.ca_file)), cert=Path(str(self.tls.cert_file)), key=Path(str(self.tls.key_file))
        )

    def channel(
        self,
        component: str,
        target: str,
        *,
        options: Sequence[tuple[str, Any]] = (),
        server_name: str | None = None,
    ) -> ClientChannel:
        """A client channel to ``target`` as ``component``'s identity, round
        robin over the addresses it resolves to; it follows the certificate
        files when they change. ``server_name`` is the name the server's
        certificate must carry when it is not the target's host. The caller
        closes it."""
        files = self.identity(component)
        try:
            return ClientChannel(
                target,
                files,
                options=options,
                server_name=server_name,
                interceptors=self.tracing.client_interceptors(),
                stub_channel=self.tracing.stub_channel,
            )
        except (OSError, ValueError) as err:
            raise ConfigError(f"the TLS certificate of {component} cannot be used: {err}") from None


class ServiceModule(Protocol):
    """What each service package's ``app`` module offers the command line."""

    COMPONENT: str
    ROLES: Mapping[str, str]
    DEFAULT_GRPC_PORT: int

    def migrations(self) -> list[Migration]:
        """The package's schema migrations, in order."""

    def check_settings(self, env: Env) -> None:
        """Reads every setting the package's roles read (ConfigError for a
        bad one), before the process migrates or starts anything."""

    async def build(self, rt: Runtime, role: str) -> list[Component]:
        """The components of one role (e.g. "server", "admitter")."""

    async def seed_demo(self, rt: Runtime) -> list[str]:
        """Create the demo event's data if missing; lines to print."""
