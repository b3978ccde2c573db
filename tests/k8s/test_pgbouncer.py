"""PgBouncer (components/pgbouncer) as the processes need it: transaction
pooling that keeps their prepared statements, a budget towards Postgres of
at most half a default Postgres, every user of Postgres also given the
direct URL its session locks need, a config PgBouncer can run with on
a read-only root filesystem, and a metrics sidecar (the PgBouncer exporter)
that reads PgBouncer's stats as a stats user and that Prometheus, and only
Prometheus, scrapes."""

from __future__ import annotations

import configparser
import io
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from boxoffice.config import Env
from tests.k8s.support import (
    K8S,
    POOLER,
    PROMETHEUS,
    built,
    by_name,
    config_map_data,
    documents,
    ingress_rules,
    monitor_jobs,
    needs_kubectl,
    of_kind,
    pod_specs,
    selects,
)
from tests.support import Stores, unavailable

INI = K8S / "components/pgbouncer/pgbouncer.ini"
PORT = 6432
# The exporter's port (its default, :9127) and its container's name.
EXPORTER_PORT = 9127
EXPORTER = "metrics"
EXPORTER_IMAGE = "quay.io/prometheuscommunity/pgbouncer-exporter"
# A default Postgres's max_connections; PgBouncer may take half of it.
POSTGRES_MAX_CONNECTIONS = 100


def _ini() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(comment_prefixes=(";",), inline_comment_prefixes=None, interpolation=None)
    parser.read_string(INI.read_text())
    return parser


def _deployment() -> dict[str, Any]:
    return dict(by_name("Deployment")[POOLER])


def _containers() -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _deployment()["spec"]["template"]["spec"]["containers"]}


def _container() -> dict[str, Any]:
    return dict(_containers()[POOLER])


def _exporter() -> dict[str, Any]:
    return dict(_containers()[EXPORTER])


def _mounted(path: str) -> dict[str, Any]:
    """The volume item ``path`` is, from the container's mounts."""
    spec = _deployment()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    for mount in _container()["volumeMounts"]:
        folder = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(folder):
            volume = volumes[mount["name"]]
            source = volume.get("configMap") or volume.get("secret") or {}
            items = {item["path"]: item["key"] for item in source.get("items", [])}
            assert path.removeprefix(folder) in items, path
            assert mount.get("readOnly") is True and "subPath" not in mount
            return dict(volume)
    raise AssertionError(f"{path} is in no mounted volume")


def test_pgbouncer_pools_transactions_and_keeps_the_prepared_statements() -> None:
    settings = _ini()["pgbouncer"]
    assert settings["pool_mode"] == "transaction"
    prepared = Env(config_map_data()).flag("BOXOFFICE_DB_PREPARED_STATEMENTS", True)
    # The processes prepare statements unless told not to; PgBouncer then
    # must track them per server connection (1.21+).
    assert not prepared or int(settings["max_prepared_statements"]) > 0
    # A client waiting for a server connection hears of the deadline first.
    deadline = float(config_map_data()["BOXOFFICE_DEFAULT_DEADLINE_SECONDS"])
    assert float(settings["query_wait_timeout"]) > deadline
    assert settings["auth_type"] == "scram-sha-256"


def test_pgbouncer_takes_at_most_half_of_a_default_postgres() -> None:
    settings = _ini()["pgbouncer"]
    per_pod = int(settings["max_db_connections"])
    assert 0 < int(settings["default_pool_size"]) + int(settings["reserve_pool_size"]) <= per_pod
    replicas = _deployment()["spec"]["replicas"]
    assert replicas * per_pod <= POSTGRES_MAX_CONNECTIONS // 2
    # The processes' own pools (their role budgets) are clients here; the
    # ConfigMap does not override them.
    assert not {"BOXOFFICE_DB_POOL_MIN", "BOXOFFICE_DB_POOL_MAX"} & set(config_map_data())


def test_pgbouncer_listens_where_its_service_points_and_runs_on_a_read_only_filesystem() -> None:
    settings = _ini()["pgbouncer"]
    assert int(settings["listen_port"]) == PORT
    (port,) = _container()["ports"]
    assert port == {"name": "pgbouncer", "containerPort": PORT, "protocol": "TCP"}
    (service_port,) = by_name("Service")[POOLER]["spec"]["ports"]
    assert service_port["port"] == PORT and service_port["targetPort"] == "pgbouncer"
    # Nothing written to the root filesystem: no socket, log or pid file.
    assert settings["unix_socket_dir"] == settings["logfile"] == settings["pidfile"] == ""
    assert _container()["securityContext"]["readOnlyRootFilesystem"] is True
    command = _container()["command"]
    assert command[0] == "pgbouncer" and len(command) == 2
    assert _mounted(command[1])["configMap"]["name"] == "boxoffice-pgbouncer-config"
    assert _mounted(settings["auth_file"])["secret"]["secretName"] == "boxoffice-pgbouncer"
    assert "*" in _ini()["databases"] and "pool_mode=" not in _ini()["databases"]["*"].replace(" ", "")
    for probe in ("readinessProbe", "livenessProbe"):
        assert _container()[probe]["tcpSocket"] == {"port": "pgbouncer"}, probe


def test_every_user_of_postgres_has_the_direct_url_for_its_session_locks() -> None:
    users = 0
    for name, spec in pod_specs():
        (container,) = spec["containers"]
        env = {e["name"]: e for e in container.get("env", [])}
        if "DATABASE_URL" not in env:
            continue
        users += 1
        assert env["DATABASE_DIRECT_URL"]["valueFrom"]["secretKeyRef"] == {
            "name": "boxoffice-secrets",
            "key": "DATABASE_DIRECT_URL",
        }, name
    assert users == 10  # the four servers, five workers and the migration


def test_the_kustomizations_run_pgbouncer() -> None:
    for path in (K8S / "kustomization.yaml", *sorted((K8S / "overlays").glob("*/kustomization.yaml"))):
        (kustomization,) = documents(path)
        assert [c for c in kustomization["components"] if c.endswith("components/pgbouncer")], path


@needs_kubectl
def test_the_image_is_a_pgbouncer_that_keeps_prepared_statements() -> None:
    (deployment,) = [o for o in built(K8S) if o["kind"] == "Deployment" and o["metadata"]["name"] == POOLER]
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == POOLER]
    image, _, tag = container["image"].rpartition(":")
    assert image.endswith("/pgbouncer")
    major, minor = (int(part) for part in tag.split(".")[:2])
    assert (major, minor) >= (1, 21)  # max_prepared_statements


def _stats_user() -> str:
    (user,) = [u.strip() for u in _ini()["pgbouncer"]["stats_users"].split(",") if u.strip()]
    return user


def test_a_metrics_sidecar_reads_pgbouncers_stats_as_a_stats_user() -> None:
    assert set(_containers()) == {POOLER, EXPORTER}
    exporter = _exporter()
    assert exporter["image"] == "pgbouncer-exporter"  # the component's images pin it
    (port,) = exporter["ports"]
    assert port == {"name": "metrics", "containerPort": EXPORTER_PORT, "protocol": "TCP"}
    args = dict(a.removeprefix("--").split("=", 1) for a in exporter["args"])
    assert args["web.listen-address"] == f":{EXPORTER_PORT}"
    # PgBouncer's admin console in the same pod, as the stats user; the
    # password is not in the URL (nor in the pod's spec): the driver takes
    # it from PGPASSWORD, out of the Secret PgBouncer's users are in.
    url = args["pgBouncer.connectionString"]
    user = _stats_user()
    assert url == f"postgres://{user}@127.0.0.1:{_ini()['pgbouncer']['listen_port']}/pgbouncer?sslmode=disable"
    env = {e["name"]: e for e in exporter["env"]}
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "boxoffice-pgbouncer", "key": "exporter-password"}
    assert "value" not in env["PGPASSWORD"]
    # The exporter's driver may send extra_float_digits; PgBouncer must
    # not refuse the login for it.
    ignored = [p.strip() for p in _ini()["pgbouncer"]["ignore_startup_parameters"].split(",")]
    assert "extra_float_digits" in ignored
    # A stats user reads SHOW POOLS/STATS; it administers nothing.
    assert user not in _ini()["pgbouncer"].get("admin_users", "")


def test_the_metrics_sidecar_is_locked_down_probed_and_bounded() -> None:
    exporter = _exporter()
    assert exporter["securityContext"] == _container()["securityContext"]
    security = exporter["securityContext"]
    assert security["runAsNonRoot"] is True and security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    probe = exporter["readinessProbe"]
    assert probe["httpGet"] == {"path": "/", "port": "metrics"}
    for bound in ("requests", "limits"):
        assert set(exporter["resources"][bound]) == {"cpu", "memory"}, bound
    # Its own limit is small beside PgBouncer's: it must not starve it.
    assert exporter["resources"]["limits"]["memory"].endswith("Mi")
    assert int(exporter["resources"]["limits"]["memory"].removesuffix("Mi")) <= 128


def test_prometheus_scrapes_the_exporter_as_its_own_job_and_reaches_nothing_else_of_pgbouncer() -> None:
    labels = _deployment()["spec"]["template"]["metadata"]["labels"]
    # Prometheus reaches the pods on the exporter's port, not PgBouncer's.
    scraped: set[int] = set()
    for policy, rule in ingress_rules(labels):
        if PROMETHEUS in rule.get("from", []):
            scraped |= {p["port"] for p in rule["ports"]}
        if EXPORTER_PORT in {p["port"] for p in rule["ports"]}:
            assert rule.get("from") == [PROMETHEUS], policy
    assert scraped == {EXPORTER_PORT}
    # One PodMonitor scrapes the sidecar, as the job the alerts select.
    monitors = [
        (monitor["metadata"]["name"], endpoint)
        for monitor in of_kind("PodMonitor")
        if selects(monitor["spec"]["selector"], labels)
        for endpoint in monitor["spec"]["podMetricsEndpoints"]
    ]
    ((name, endpoint),) = monitors
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert monitor_jobs()[name] == "boxoffice-pgbouncer"
    # The Service is PgBouncer's only: scrapes go to each pod.
    (service_port,) = by_name("Service")[POOLER]["spec"]["ports"]
    assert service_port["targetPort"] == "pgbouncer"


@needs_kubectl
def test_the_exporter_image_is_pinned() -> None:
    (deployment,) = [o for o in built(K8S) if o["kind"] == "Deployment" and o["metadata"]["name"] == POOLER]
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == EXPORTER]
    image, _, tag = container["image"].rpartition(":")
    assert image == EXPORTER_IMAGE
    # 0.11 or later: it connects per scrape, so it starts (and the pod gets
    # ready) whether or not PgBouncer answers yet.
    found = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", tag)
    assert found is not None, tag
    assert (int(found.group(1)), int(found.group(2))) >= (0, 11)


def test_the_component_documents_the_exporters_password() -> None:
    text = (K8S / "components/pgbouncer/kustomization.yaml").read_text()
    assert "exporter-password" in text and _stats_user() in text
    readme = (K8S / "README.md").read_text()
    assert "exporter-password" in readme and _stats_user() in readme


def test_the_readme_says_how_to_make_the_pgbouncer_secret() -> None:
    readme = (K8S / "README.md").read_text()
    assert "boxoffice-pgbouncer" in readme and "DATABASE_DIRECT_URL" in readme
    assert Path(INI).name in readme


def _pgbouncer() -> str:
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None)
    if found is None:
        unavailable("pgbouncer (Debian package pgbouncer) is not installed: run scripts/ops_deps.sh as root")
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _startup_answer(port: int, **parameters: str) -> bytes:
    """The type of PgBouncer's first message to a protocol 3.0 startup
    packet with ``parameters``: R (authentication asked) or E (refused)."""
    body = b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in parameters.items()) + b"\0"
    packet = (8 + len(body)).to_bytes(4, "big") + (3 << 16).to_bytes(4, "big") + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(packet)
        return conn.recv(1)


def _local_ini(database: dict[str, Any], port: int, userlist: Path, version: tuple[int, int]) -> str:
    """The component's pgbouncer.ini as it is, but for where things are on
    this machine: the test's Postgres, a local port, the userlist file (and,
    for a PgBouncer older than 1.21, without max_prepared_statements, which
    it does not know)."""
    ini = _ini()
    target = {"host": database.get("host") or "127.0.0.1", "port": database.get("port") or "5432"}
    if database.get("password"):
        target["password"] = database["password"]
    ini["databases"]["*"] = " ".join(f"{key}={value}" for key, value in target.items())
    settings = ini["pgbouncer"]
    settings["listen_addr"] = "127.0.0.1"
    settings["listen_port"] = str(port)
    settings["auth_file"] = str(userlist)
    if version < (1, 21):
        settings.pop("max_prepared_statements")
    out = io.StringIO()
    ini.write(out)
    return out.getvalue()


def test_the_manifests_pgbouncer_ini_runs_and_pools_transactions(stores: Stores, tmp_path: Path) -> None:
    command = _pgbouncer()
    text = subprocess.run([command, "--version"], capture_output=True, text=True, check=True, timeout=30).stdout
    found = re.search(r"PgBouncer (\d+)\.(\d+)", text)
    assert found is not None, text
    version = (int(found.group(1)), int(found.group(2)))
    database = conninfo_to_dict(stores.database_url)
    user = str(database.get("user") or "postgres")
    userlist = tmp_path / "userlist.txt"
    userlist.write_text(f'"{user}" "pgbouncer-test"\n"{_stats_user()}" "exporter-test"\n')
    port = _free_port()
    ini = tmp_path / "pgbouncer.ini"
    ini.write_text(_local_ini(database, port, userlist, version))
    # PgBouncer will not run as root; it reads its files, then drops to -u.
    argv = [command, *(["-u", "nobody"] if os.geteuid() == 0 else []), str(ini)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"postgresql://{user}:pgbouncer-test@127.0.0.1:{port}/{database['dbname']}"
    try:
        # Ready once it says it listens (its log goes to stderr); a line
        # it cannot start without ends the output instead.
        assert process.stdout is not None
        said: list[str] = []
        while not any(f"listening on 127.0.0.1:{port}" in line for line in said):
            line = process.stdout.readline()
            assert line, "".join(said)
            said.append(line)
        first = psycopg.connect(url, autocommit=True)
        with first, psycopg.connect(url, autocommit=True) as second:

            def backend(conn: psycopg.Connection[Any]) -> int:
                row = conn.execute("SELECT pg_backend_pid()").fetchone()
                assert row is not None
                return int(row[0])

            # Transaction pooling: between transactions a client holds no
            # server connection, so the second client is served by the
            # first one's (a session pooler would give each its own).
            assert backend(first) == backend(second)
            # Inside a transaction the server connection is the client's.
            with first.transaction():
                held = backend(first)
                assert backend(second) != held
                assert backend(first) == held
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url.replace("pgbouncer-test", "wrong"), connect_timeout=5).close()
        # The exporter's view: the admin console, as the stats user, reads
        # the pools' waiting clients (pgbouncer_pools_client_waiting_connections).
        console = f"postgresql://{_stats_user()}:exporter-test@127.0.0.1:{port}/pgbouncer"
        with psycopg.connect(console, autocommit=True, cursor_factory=psycopg.ClientCursor) as admin:
            cursor = admin.execute("SHOW POOLS")
            assert cursor.description is not None
            assert "cl_waiting" in [column.name for column in cursor.description]
            with pytest.raises(psycopg.Error):
                admin.execute("PAUSE")  # a stats user, not an admin
        # A login that sends extra_float_digits (as the exporter's Go driver
        # may) is asked for its password, not refused.
        assert _startup_answer(port, user=_stats_user(), database="pgbouncer", extra_float_digits="2") == b"R"
    finally:
        process.terminate()
        process.wait(timeout=30)
