from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from boxoffice.config import ConfigError, Env, ServerConfig, TokenConfig
from tests.support import Stores


def test_defaults_are_valid() -> None:
    config = ServerConfig.from_env(Env({}), default_grpc_port=50051)
    assert config.grpc_port == 50051
    assert config.grpc_address == "127.0.0.1:50051"


@pytest.mark.parametrize(
    ("environ", "needle"),
    [
        ({"BOXOFFICE_GRPC_PORT": "eighty"}, "not an integer"),
        ({"BOXOFFICE_GRPC_PORT": "70000"}, "must be <= 65535"),
        ({"BOXOFFICE_SHUTDOWN_GRACE_SECONDS": "-1"}, "must be >= 0"),
        ({"BOXOFFICE_DEFAULT_DEADLINE_SECONDS": "nan"}, "must be a number"),
    ],
)
def test_bad_server_values_are_config_errors(environ: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        ServerConfig.from_env(Env(environ), default_grpc_port=1)


def test_an_optional_integer_is_none_when_absent_and_checked_when_given() -> None:
    assert Env({}).optional_integer("BOXOFFICE_PROCESS_INDEX", minimum=0) is None
    assert Env({"BOXOFFICE_PROCESS_INDEX": "1"}).optional_integer("BOXOFFICE_PROCESS_INDEX", minimum=0) == 1
    with pytest.raises(ConfigError, match="BOXOFFICE_PROCESS_INDEX=-1 must be >= 0"):
        Env({"BOXOFFICE_PROCESS_INDEX": "-1"}).optional_integer("BOXOFFICE_PROCESS_INDEX", minimum=0)
    with pytest.raises(ConfigError, match="'one' is not an integer"):
        Env({"BOXOFFICE_PROCESS_INDEX": "one"}).optional_integer("BOXOFFICE_PROCESS_INDEX")


def test_token_keys_parse_and_validate() -> None:
    config = TokenConfig.from_env(
        Env({"BOXOFFICE_TOKEN_KEYS": "a:0123456789abcdef,b:fedcba9876543210", "BOXOFFICE_TOKEN_ACTIVE_KID": "b"})
    )
    assert set(config.keys) == {"a", "b"}
    assert config.active_kid == "b"
    with pytest.raises(ConfigError, match="at least 16"):
        TokenConfig.from_env(Env({"BOXOFFICE_TOKEN_KEYS": "a:short"}))
    with pytest.raises(ConfigError, match="not in"):
        TokenConfig.from_env(Env({"BOXOFFICE_TOKEN_KEYS": "a:0123456789abcdef", "BOXOFFICE_TOKEN_ACTIVE_KID": "z"}))


def test_cli_reports_bad_config_with_exit_code_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "boxoffice_cli", "up"],
        env={"BOXOFFICE_GRPC_PORT": "-5", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "configuration error" in proc.stderr
    assert "BOXOFFICE_GRPC_PORT" in proc.stderr
    assert "Traceback" not in proc.stderr


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        "PATH": "",
        "BOXOFFICE_TLS": "off",
        "BOXOFFICE_TOKEN_KEYS": "k1:0123456789abcdef0123",
        "BOXOFFICE_WEBHOOK_SECRETS": "whsec_0123456789abcdef",
        "BOXOFFICE_CHECKIN_KEYS": "c1:" + "0123456789abcdef" * 4,
        "BOXOFFICE_PAYMENT_PROVIDER": "sandbox",
        "BOXOFFICE_METRICS_PORT": "0",
        "BOXOFFICE_HEALTH_PORT": "off",
    }
    return subprocess.run(
        [sys.executable, "-m", "boxoffice_cli", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """Exit 2 and exactly one line on stderr that is not a JSON log line."""
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("{")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_a_database_url_that_is_not_a_url_is_one_line_before_anything_starts() -> None:
    line = _one_line(_run(["migrate"], DATABASE_URL="notaurl"))
    assert line.startswith("boxoffice: configuration error: DATABASE_URL=")


def test_payment_off_the_embedded_stores_refuses_an_unnamed_sandbox_before_anything_starts(stores: Stores) -> None:
    """The sandbox takes no money: a payment process on real stores names its
    provider (stripe, or sandbox for a staging mesh) or does not start."""
    line = _one_line(
        _run(
            ["payment-svc"],
            DATABASE_URL=stores.database_url,
            REDIS_URL=stores.redis_url,
            BOXOFFICE_PAYMENT_PROVIDER="",
        )
    )
    assert line.startswith("boxoffice: configuration error: BOXOFFICE_PAYMENT_PROVIDER is unset")


def test_an_unreachable_database_is_one_line(stores: Stores) -> None:
    line = _one_line(_run(["migrate"], DATABASE_URL="postgresql://postgres@127.0.0.1:1/postgres"))
    assert line.startswith("boxoffice: cannot reach Postgres: ")


def test_an_unreachable_redis_is_one_line(stores: Stores) -> None:
    line = _one_line(_run(["queue-svc"], DATABASE_URL=stores.database_url, REDIS_URL="redis://127.0.0.1:1/0"))
    assert line.startswith("boxoffice: cannot reach Redis: ")


def test_a_port_in_use_is_one_line(stores: Stores) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _one_line(
            _run(
                ["queue-svc"],
                DATABASE_URL=stores.database_url,
                REDIS_URL=stores.redis_url,
                BOXOFFICE_GRPC_PORT=str(port),
            )
        )
    assert line == (
        f"boxoffice: configuration error: queue cannot listen on 127.0.0.1:{port} (BOXOFFICE_GRPC_PORT): "
        "the port is in use"
    )


def test_an_unknown_event_loop_is_one_line_before_anything_starts() -> None:
    line = _one_line(_run(["up"], BOXOFFICE_EVENT_LOOP="libuv"))
    assert line == "boxoffice: configuration error: BOXOFFICE_EVENT_LOOP='libuv' must be one of uvloop, asyncio"


def test_several_processes_are_refused_for_a_background_role_and_on_embedded_stores(stores: Stores) -> None:
    line = _one_line(_run(["admitter"], BOXOFFICE_PROCESSES="2", DATABASE_URL=stores.database_url))
    assert line.startswith("boxoffice: configuration error: BOXOFFICE_PROCESSES=2 applies to the server roles")
    line = _one_line(_run(["queue-svc"], BOXOFFICE_PROCESSES="2"))
    assert line == (
        "boxoffice: configuration error: BOXOFFICE_PROCESSES=2 needs DATABASE_URL and REDIS_URL (not the embedded stores)"
    )
    line = _one_line(_run(["queue-svc"], BOXOFFICE_PROCESSES="0"))
    assert line.startswith("boxoffice: configuration error: BOXOFFICE_PROCESSES")
    line = _one_line(_run(["queue-svc"], BOXOFFICE_PROCESS_INDEX="first"))
    assert line == "boxoffice: configuration error: BOXOFFICE_PROCESS_INDEX='first' is not an integer"
