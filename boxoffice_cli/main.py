"""The ``boxoffice`` command: ``up`` runs the whole mesh in one process;
each other command runs one part, as a container of a cluster does."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
import typing
from collections.abc import Mapping, Sequence

import psycopg
import psycopg_pool
import redis.exceptions

from boxoffice import access, db, logs, loops, secrets
from boxoffice.config import ConfigError, Env, ServerConfig, StoreConfig, TlsConfig, TokenConfig
from boxoffice.embedded import EmbeddedPostgres, EmbeddedRedis, default_data_dir
from boxoffice.lifecycle import Component, run
from boxoffice.metrics import MetricsEndpoint
from boxoffice.runtime import Runtime, ServiceModule
from boxoffice.server import GrpcServer
from boxoffice.tls import CertFiles, local_pki
from boxoffice.tracing import TracingConfig
from boxoffice_cli import workers
from boxoffice_cli.pipes import STDOUT_CLOSED, QuietStdout
from boxoffice_cli.ports import Listener, ensure_free
from mail_svc import app as mail_app

_log = logging.getLogger("boxoffice.cli")

# Ports of `boxoffice up`: one gRPC server per service in one process.
UP_PORTS = {"queue": 50051, "booking": 50052, "payment": 50053, "checkin": 50055, "edge": 8080}
# The plaintext health-only port of a single-role process, for kubelet.
HEALTH_PORT = 50050
# Components that serve HTTP, not gRPC (their port comes from their own settings).
_HTTP_COMPONENTS = frozenset({"edge"})
# The namespace in the SPIFFE IDs of `boxoffice up`'s certificates.
UP_NAMESPACE = "boxoffice"


def service_modules() -> list[ServiceModule]:
    """The services of the mesh, in start order (the one list of them)."""
    from booking_svc import app as booking_app
    from checkin_svc import app as checkin_app
    from edge_svc import app as edge_app
    from mail_svc import app as mail_app
    from payment_svc import app as payment_app
    from queue_svc import app as queue_app

    return [queue_app, booking_app, payment_app, checkin_app, edge_app, mail_app]


def _stores_of(module: ServiceModule) -> tuple[str, ...]:
    """The stores a service uses (the edge needs no database)."""
    stores: tuple[str, ...] = getattr(module, "STORES", ("postgres", "redis"))
    return stores


def commands(modules: Sequence[ServiceModule]) -> dict[str, tuple[ServiceModule, str]]:
    """Each command (``queue-svc``, ``relay``, ...): its service and role."""
    table: dict[str, tuple[ServiceModule, str]] = {}
    for module in modules:
        for command, role in module.ROLES.items():
            table[command] = (module, role)
    return table


@dataclasses.dataclass
class _Stores:
    database_url: str
    redis_url: str
    embedded: list[EmbeddedPostgres | EmbeddedRedis]

    def stop(self) -> None:
        for store in reversed(self.embedded):
            store.stop()


def _stores(store: StoreConfig, *, need_redis: bool = True, need_postgres: bool = True) -> _Stores:
    """The configured stores, or embedded ones for what is not configured
    (no Redis at all when the command needs none)."""
    embedded: list[EmbeddedPostgres | EmbeddedRedis] = []
    data_dir = default_data_dir(store.data_dir)
    database_url = store.database_url
    redis_url = store.redis_url
    try:
        if database_url is None and need_postgres:
            pg = EmbeddedPostgres(data_dir / "postgres")
            database_url = pg.start()
            embedded.append(pg)
        if redis_url is None and need_redis:
            rd = EmbeddedRedis(data_dir / "redis")
            redis_url = rd.start()
            embedded.append(rd)
    except BaseException:
        for item in embedded:
            item.stop()
        raise
    return _Stores(database_url or "", redis_url or "", embedded)


def _runtime(
    env: Env,
    default_grpc_port: int,
    stores: _Stores,
    *,
    default_health_port: int | None = None,
    role: str | None = None,
) -> Runtime:
    return Runtime.from_env(
        env,
        database_url=stores.database_url,
        redis_url=stores.redis_url,
        default_grpc_port=default_grpc_port,
        default_health_port=default_health_port,
        role=role,
    )


def up_pki(data_dir: str, trust_domain: str) -> dict[str, CertFiles]:
    """`boxoffice up`'s local CA and a certificate per role (the operator's
    included, for people and tools on this machine) under ``<data dir>/tls``,
    reusing those still good."""
    identities = {role: access.spiffe_id(trust_domain, UP_NAMESPACE, role) for role in access.ROLES}
    return local_pki(default_data_dir(data_dir) / "tls", identities)


async def _migrate(url: str, modules: Sequence[ServiceModule]) -> list[str]:
    """Apply the modules' migrations."""
    migrations: list[db.Migration] = []
    for module in modules:
        migrations.extend(module.migrations())
    return await db.migrate(url, migrations)


def _up_env(env: Env, on_embedded_stores: bool) -> Env:
    """`boxoffice up`'s environment: every service dials the others on the
    ports this process serves them on, and the edge's development sign-in
    is on when the stores are embedded (unless switched off)."""
    ports = _up_ports(env)
    wired = {
        f"BOXOFFICE_{name.upper()}_ADDR": f"127.0.0.1:{ports[name]}"
        for name in ("queue", "booking", "payment", "checkin")
    }
    # The mailer keeps .eml files when no relay is set (only here).
    wired[mail_app.UP_ENV] = "true"
    if on_embedded_stores and env.raw(secrets.EDGE_DEV_SIGNIN) is None:
        wired[secrets.EDGE_DEV_SIGNIN] = "true"
    for drain in ("BOXOFFICE_EDGE_DRAIN_SECONDS", "BOXOFFICE_DRAIN_SECONDS"):
        if env.raw(drain) is None:
            # No load balancer to tell on one machine: Ctrl-C stops at once.
            wired[drain] = "0"
    return env.overlay(wired)


def _up_ports(env: Env) -> dict[str, int]:
    """The port of each service of `boxoffice up` (and of the edge)."""
    return {
        name: env.integer(f"BOXOFFICE_{name.upper()}_PORT", port, minimum=0, maximum=65535)
        for name, port in UP_PORTS.items()
    }


def _up_listeners(env: Env) -> list[Listener]:
    """Every port `boxoffice up` listens on, to check before anything starts."""
    base = ServerConfig.from_env(env, default_grpc_port=0)
    edge_host = env.string("BOXOFFICE_EDGE_HOST", "127.0.0.1")
    return [
        *(
            Listener(
                name, f"BOXOFFICE_{name.upper()}_PORT", edge_host if name in _HTTP_COMPONENTS else base.grpc_host, port
            )
            for name, port in _up_ports(env).items()
        ),
        Listener("metrics", "BOXOFFICE_METRICS_PORT", base.grpc_host, base.metrics_port),
    ]


async def _up(env: Env, modules: Sequence[ServiceModule], stores: _Stores, store: StoreConfig) -> None:
    env = _up_env(env, on_embedded_stores=store.database_url is None and store.redis_url is None)
    base = ServerConfig.from_env(env, default_grpc_port=0)
    rt = _runtime(env, 0, stores)
    tls_dir = None
    if rt.tls.enabled:
        # Each service serves, and dials, as its own role.
        pki = up_pki(store.data_dir, rt.tls.trust_domain)
        for module in modules:
            if module.COMPONENT in pki:  # the mailer serves and dials nothing of the mesh
                rt.identities[module.COMPONENT] = pki[module.COMPONENT]
        tls_dir = pki[access.OPERATOR].ca.parent
    ports = _up_ports(env)
    # Each migration applied is in the log (db.migrate); the banner stays short.
    await _migrate(store.direct_url or stores.database_url, modules)
    components: list[Component] = []
    service_components: list[Component] = []
    for name, port in ports.items():
        if name not in _HTTP_COMPONENTS:
            rt.grpc_ports[name] = port
    for module in modules:
        for role in module.ROLES.values():
            service_components.extend(await module.build(rt, role))
    metrics = MetricsEndpoint(rt.registry, base.grpc_host, base.metrics_port)
    components.extend(rt.infrastructure())
    components.extend(service_components)

    def started() -> None:
        metrics.start()
        print("boxoffice is up", flush=True)
        print(f"  postgres   {_redact(stores.database_url)}", flush=True)
        print(f"  redis      {stores.redis_url}", flush=True)
        if tls_dir is not None:
            print(f"  tls        {tls_dir} (ca.pem; operator.pem and operator-key.pem for your tools)", flush=True)
        else:
            print("  tls        off (BOXOFFICE_TLS=off)", flush=True)
        for component in service_components:
            url = getattr(component, "url", None)
            address = getattr(component, "address", None)
            if url:
                print(f"  {component.name:<10} {url}", flush=True)
            elif address:
                scheme = "grpcs" if tls_dir is not None else "grpc"
                print(f"  {component.name:<10} {scheme}://{address}", flush=True)
        print(f"  mail       {mail_app.banner(env)}", flush=True)
        print(f"  metrics    {metrics.url}", flush=True)
        print("Ctrl-C stops everything.", flush=True)

    async def seed_after_start() -> None:
        for module in modules:
            for line in await module.seed_demo(rt):
                print(f"  demo: {line}", flush=True)

    stop = asyncio.Event()

    def on_started() -> None:
        started()
        seeding = asyncio.get_running_loop().create_task(seed_after_start())
        seeding.add_done_callback(lambda task: _seed_done(task, stop))

    try:
        await run(components, grace_seconds=base.shutdown_grace_seconds, stop=stop, on_started=on_started)
    finally:
        metrics.stop()


def _seed_done(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    if not task.cancelled() and task.exception() is not None:
        _log.error("seeding the demo event failed", exc_info=task.exception())
        stop.set()


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        # An empty password (the embedded Postgres's) is shown as it is, so
        # that the line can be used as it is (DATABASE_URL for boxoffice report).
        return f"{scheme}://{user}:***@{host}" if ":" in creds and creds.split(":", 1)[1] else url
    return url


async def _one(env: Env, module: ServiceModule, role: str, stores: _Stores, store: StoreConfig) -> None:
    server = ServerConfig.from_env(env, default_grpc_port=module.DEFAULT_GRPC_PORT)
    rt = _runtime(
        env, module.DEFAULT_GRPC_PORT, stores, default_health_port=HEALTH_PORT, role=f"{module.COMPONENT}-{role}"
    )
    if "postgres" in _stores_of(module):
        await _migrate(store.direct_url or stores.database_url, [module])
    built = await module.build(rt, role)
    if module.COMPONENT in _HTTP_COMPONENTS:
        # An HTTP process answers its probes and serves its metrics on its own port.
        edge_port = env.integer("BOXOFFICE_EDGE_PORT", 8080, minimum=0, maximum=65535)
        ensure_free(
            [Listener("the edge", "BOXOFFICE_EDGE_PORT", env.string("BOXOFFICE_EDGE_HOST", "127.0.0.1"), edge_port)]
        )
        await run([*rt.infrastructure(), *built], grace_seconds=server.shutdown_grace_seconds)
        return
    if not any(isinstance(component, GrpcServer) for component in built):
        # A background role serves gRPC health (for probes) and nothing else;
        # on an ephemeral port unless BOXOFFICE_GRPC_PORT says otherwise, so
        # that it never shares a service's port on one machine.
        if env.raw("BOXOFFICE_GRPC_PORT") is None:
            rt.grpc_ports[module.COMPONENT] = 0
        built.append(rt.grpc_server(module.COMPONENT, []))
    metrics_host = env.string("BOXOFFICE_METRICS_HOST", server.grpc_host)
    if not server.reuse_port:
        # Before any server starts (copies under BOXOFFICE_PROCESSES share
        # their ports: their supervisor checked them).
        grpc_port = rt.grpc_ports.get(module.COMPONENT, server.grpc_port)
        ensure_free(
            [
                Listener(module.COMPONENT, "BOXOFFICE_GRPC_PORT", server.grpc_host, grpc_port),
                Listener("health", "BOXOFFICE_HEALTH_PORT", server.grpc_host, rt.tls.health_port or 0),
                Listener("metrics", "BOXOFFICE_METRICS_PORT", metrics_host, server.metrics_port),
            ]
        )
    metrics = MetricsEndpoint(rt.registry, metrics_host, server.metrics_port)
    try:
        await run([*rt.infrastructure(), *built], grace_seconds=server.shutdown_grace_seconds, on_started=metrics.start)
    finally:
        metrics.stop()


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run ``boxoffice ARGV...``; the exit code. A closed stdout (the reader
    of a pipe gone, as with ``| head -1``) does not stop a command halfway:
    it finishes its work quietly and exits ``STDOUT_CLOSED`` unless it failed
    otherwise."""
    quiet = QuietStdout(sys.stdout)
    sys.stdout = typing.cast(typing.TextIO, quiet)
    try:
        code = _command(argv, environ)
    finally:
        quiet.flush()
        sys.stdout = quiet.stream
    return STDOUT_CLOSED if quiet.gone and code == 0 else code


def _command(argv: Sequence[str] | None, environ: Mapping[str, str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["admin"]:
        # The operator's command: a client of the admin API, not a process
        # of the mesh.
        from boxoffice_cli import admin

        return admin.main(words[1:], os.environ if environ is None else environ)
    if words[:1] in (["report"], ["simulate"]):
        # The operator's on-sale report and the simulator (which ends with it).
        from boxoffice_cli import report, simulate

        run = report.main if words[0] == "report" else simulate.main
        return run(words[1:], os.environ if environ is None else environ)
    if words[:1] == ["verify-draw"]:
        # Anyone's command: checks a published pre-queue shuffle from public data.
        from boxoffice_cli import verify_draw

        return verify_draw.main(words[1:])
    modules = service_modules()
    table = commands(modules)
    parser = argparse.ArgumentParser(prog="boxoffice", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    runnable = [
        sub.add_parser("up", help="run the whole mesh in one process (embedded stores when no URLs are set)"),
        sub.add_parser("migrate", help="apply schema migrations and exit"),
    ]
    sub.add_parser("admin", help="operate events and waiting rooms over the admin API (boxoffice admin --help)")
    sub.add_parser("report", help="an event's on-sale report and reconciliation (boxoffice report --help)")
    sub.add_parser("simulate", help="a synthetic on-sale: a crowd on the real mesh, or the model (--model)")
    sub.add_parser("verify-draw", help="check an event's published pre-queue shuffle from public data alone")
    for command, (module, role) in sorted(table.items()):
        runnable.append(sub.add_parser(command, help=f"run {module.COMPONENT} {role}"))
    for command_parser in runnable:
        command_parser.add_argument(
            "--check-config",
            action="store_true",
            help="run the start-up checks of the settings and secrets, then exit (0: settings ok, 2: the error)",
        )
    args = parser.parse_args(words)
    raw_environ = os.environ if environ is None else environ
    env = Env(raw_environ)
    processes = 1
    try:
        # A copy of a role run under BOXOFFICE_PROCESSES says which it is in every line.
        index = env.optional_integer("BOXOFFICE_PROCESS_INDEX", minimum=0)
        fields = None if index is None else {"process": index}
        logs.configure(env.choice("BOXOFFICE_LOG_LEVEL", "info", ("debug", "info", "warning", "error")), fields)
        store = StoreConfig.from_env(env)
        # Validate everything before starting anything.
        ServerConfig.from_env(env, default_grpc_port=0)
        TokenConfig.from_env(env)
        TracingConfig.from_env(env)
        loop = loops.loop_name(env)
        tls = TlsConfig.from_env(env, default_health_port=HEALTH_PORT)
        if args.command not in ("up", "migrate"):
            # Only `boxoffice up` makes its own CA.
            tls.require_files()
        # A process off the embedded stores never runs on development secrets.
        components: set[str] | None = None
        if args.command == "migrate":
            components = set()
        elif args.command != "up":
            components = {table[args.command][0].COMPONENT}
        secrets.refuse_development_secrets(
            env, on_embedded_stores=store.database_url is None and store.redis_url is None, components=components
        )
        if args.command == "up":
            # Every port before any store or server starts.
            ensure_free(_up_listeners(env))
        # Every setting of what runs, before a migration or a store starts.
        if args.command == "up":
            for module in modules:
                module.check_settings(
                    _up_env(env, on_embedded_stores=store.database_url is None and store.redis_url is None)
                )
        elif args.command != "migrate":
            table[args.command][0].check_settings(env)
        if args.command not in ("up", "migrate"):
            needs = _stores_of(table[args.command][0])
            embedded = ("postgres" in needs and store.database_url is None) or (
                "redis" in needs and store.redis_url is None
            )
            processes = workers.process_count(env, args.command, on_embedded_stores=embedded)
    except ConfigError as err:
        print(f"boxoffice: configuration error: {err}", file=sys.stderr)
        return 2
    if args.check_config:
        # Nothing started, nothing connected to: the checks alone.
        print("settings ok", flush=True)
        return 0
    if processes > 1:
        module = table[args.command][0]
        server = ServerConfig.from_env(env, default_grpc_port=module.DEFAULT_GRPC_PORT)
        metrics_host = env.string("BOXOFFICE_METRICS_HOST", server.grpc_host)
        try:
            # The copies share the gRPC and health ports with each other alone.
            ensure_free(
                [
                    Listener(args.command, "BOXOFFICE_GRPC_PORT", server.grpc_host, server.grpc_port),
                    Listener("health", "BOXOFFICE_HEALTH_PORT", server.grpc_host, tls.health_port or 0),
                    *(
                        Listener(
                            f"metrics of copy {i}", "BOXOFFICE_METRICS_PORT", metrics_host, server.metrics_port + i
                        )
                        for i in range(processes)
                        if server.metrics_port
                    ),
                ]
            )
        except ConfigError as err:
            print(f"boxoffice: configuration error: {err}", file=sys.stderr)
            return 2
        return workers.supervise(args.command, processes, raw_environ, server.metrics_port)
    try:
        needs = ("postgres", "redis") if args.command in ("up", "migrate") else _stores_of(table[args.command][0])
        stores = _stores(
            store, need_redis=args.command != "migrate" and "redis" in needs, need_postgres="postgres" in needs
        )
    except Exception as err:  # a store that cannot start is a clear message
        print(f"boxoffice: cannot start the embedded stores: {err}", file=sys.stderr)
        return 1
    try:
        if args.command == "up":
            loops.run(_up(env, modules, stores, store), loop)
        elif args.command == "migrate":
            applied = asyncio.run(_migrate(store.direct_url or stores.database_url, modules))
            print("\n".join(applied) if applied else "schema is up to date")
        else:
            module, role = table[args.command]
            loops.run(_one(env, module, role, stores, store), loop)
    except ConfigError as err:
        print(f"boxoffice: configuration error: {err}", file=sys.stderr)
        return 2
    except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as err:
        print(f"boxoffice: cannot reach Postgres: {_first_line(err)}", file=sys.stderr)
        return 2
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as err:
        print(f"boxoffice: cannot reach Redis: {_first_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    finally:
        stores.stop()
    return 0


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


if __name__ == "__main__":
    sys.exit(main())
