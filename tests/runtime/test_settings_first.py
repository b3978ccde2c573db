"""Every setting of a process is read and checked before anything starts:
a bad one is a one-line error (exit 2) and no migration has run."""

from __future__ import annotations

import secrets as random
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from boxoffice import access
from boxoffice_cli import main as cli
from tests.support import Stores, tls_environ


@pytest.fixture
def empty_database(stores: Stores) -> Iterator[str]:
    """The URL of a new database with nothing in it."""
    name = f"boxoffice_settings_{random.token_hex(4)}"
    with psycopg.connect(stores.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    parts = urlsplit(stores.admin_url)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(stores.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def _tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return [str(row[0]) for row in rows]


def _production(stores: Stores, database_url: str, role: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": stores.redis_url,
        "BOXOFFICE_TOKEN_KEYS": f"k1:{random.token_hex(32)}",
        "BOXOFFICE_WEBHOOK_SECRETS": f"whsec_{random.token_hex(16)}",
        "BOXOFFICE_CHECKIN_KEYS": f"c1:{random.token_hex(32)}",
        "BOXOFFICE_SANDBOX_WEBHOOK_SECRET": f"whsec_{random.token_hex(16)}",
        "BOXOFFICE_PAYMENT_PROVIDER": "sandbox",
        "BOXOFFICE_GRPC_PORT": "0",
        "BOXOFFICE_HEALTH_PORT": "off",
        "BOXOFFICE_METRICS_PORT": "0",
        **tls_environ(stores.pki.files(role)),
    }


@pytest.mark.parametrize(
    ("command", "role", "setting", "value"),
    [
        ("payment-svc", access.PAYMENT, "BOXOFFICE_WEBHOOK_SECRETS", "short"),
        ("booking-svc", access.BOOKING, "BOXOFFICE_BOOKING_SWEEP_BATCH_SIZE", "-5"),
        ("queue-svc", access.QUEUE, "BOXOFFICE_QUEUE_TICK_SECONDS", "forever"),
    ],
)
def test_a_bad_setting_is_refused_before_any_migration(
    stores: Stores,
    empty_database: str,
    capsys: pytest.CaptureFixture[str],
    command: str,
    role: str,
    setting: str,
    value: str,
) -> None:
    environ = {**_production(stores, empty_database, role), setting: value}
    assert cli.main([command], environ=environ) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "configuration error" in err[0] and setting in err[0], err
    assert _tables(empty_database) == []


@pytest.mark.parametrize(
    ("command", "role"),
    [("relay", access.RELAY), ("issuer", access.ISSUER), ("payment-svc", access.PAYMENT), ("migrate", None)],
)
def test_check_config_runs_the_checks_alone(
    stores: Stores, empty_database: str, capsys: pytest.CaptureFixture[str], command: str, role: str | None
) -> None:
    environ = _production(stores, empty_database, role or access.OPERATOR)
    assert cli.main([command, "--check-config"], environ=environ) == 0
    assert capsys.readouterr().out.strip().splitlines() == ["settings ok"]
    # The checks alone: nothing migrated, nothing started.
    assert _tables(empty_database) == []
    # A development secret is refused as the process would refuse it: the same one line, exit 2.
    refused = {key: value for key, value in environ.items() if key != "BOXOFFICE_TOKEN_KEYS"}
    assert cli.main([command, "--check-config"], environ=refused) == (0 if command == "migrate" else 2)
    checked = capsys.readouterr()
    if command == "migrate":
        assert checked.out.strip() == "settings ok"
        return
    assert checked.out == ""
    err = checked.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("boxoffice: configuration error: BOXOFFICE_TOKEN_KEYS is unset"), err
    assert _tables(empty_database) == []
