from __future__ import annotations

import subprocess
import sys

import pytest

from boxoffice.config import ConfigError, Env, ServerConfig, TokenConfig


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
