"""PgBouncer (components/pgbouncer) as the processes need it: transaction
pooling that keeps their prepared statements, a budget towards Postgres of
at most half a default Postgres, every user of Postgres also given the
direct URL its session locks need, and a config PgBouncer can run with on
a read-only root filesystem."""

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
from tests.k8s.support import K8S, POOLER, built, by_name, config_map_data, documents, kubectl, pod_specs
from tests.support import Stores

INI = K8S / "components/pgbouncer/pgbouncer.ini"
PORT = 6432
# A default Postgres's max_connections; PgBouncer may take half of it.
POSTGRES_MAX_CONNECTIONS = 100


def _ini() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(comment_prefixes=(";",), inline_comment_prefixes=None, interpolation=None)
    parser.read_string(INI.read_text())
    return parser


def _deployment() -> dict[str, Any]:
    return dict(by_name("Deployment")[POOLER])


def _container() -> dict[str, Any]:
    (container,) = _deployment()["spec"]["template"]["spec"]["containers"]
    return dict(container)


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
    assert users == 8  # the three servers, four workers and the migration


def test_the_kustomizations_run_pgbouncer() -> None:
    for path in (K8S / "kustomization.yaml", *sorted((K8S / "overlays").glob("*/kustomization.yaml"))):
        (kustomization,) = documents(path)
        assert [c for c in kustomization["components"] if c.endswith("components/pgbouncer")], path


@pytest.mark.skipif(kubectl() is None, reason="kubectl (for kustomize) is not on PATH")
def test_the_image_is_a_pgbouncer_that_keeps_prepared_statements() -> None:
    (deployment,) = [o for o in built(K8S) if o["kind"] == "Deployment" and o["metadata"]["name"] == POOLER]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    image, _, tag = container["image"].rpartition(":")
    assert image.endswith("/pgbouncer")
    major, minor = (int(part) for part in tag.split(".")[:2])
    assert (major, minor) >= (1, 21)  # max_prepared_statements


def test_the_readme_says_how_to_make_the_pgbouncer_secret() -> None:
    readme = (K8S / "README.md").read_text()
    assert "boxoffice-pgbouncer" in readme and "DATABASE_DIRECT_URL" in readme
    assert Path(INI).name in readme


def _pgbouncer() -> str:
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None)
    if found is None:
        message = "pgbouncer (Debian package pgbouncer) is not installed: run scripts/ops_deps.sh as root"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
    userlist.write_text(f'"{user}" "pgbouncer-test"\n')
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
    finally:
        process.terminate()
        process.wait(timeout=30)
