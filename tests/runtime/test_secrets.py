"""Secrets from files, re-read when they change, and production refusing the
development ones."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from boxoffice.config import ConfigError, Env, TokenConfig
from boxoffice.errors import Unauthenticated
from boxoffice.secrets import (
    DEV_CHECKIN_SEED,
    DEV_TOKEN_KEY,
    DEV_WEBHOOK_SECRET,
    SecretSource,
    development_secrets_in_use,
    refuse_development_secrets,
)
from payment_svc.config import PaymentConfig
from payment_svc.webhooks import WebhookVerifier, signature_header
from tests.support import ManualClock

K1 = "k1:first-key-0123456789abcdef"
K2 = "k2:second-key-0123456789abcdef"
PRODUCTION = {"DATABASE_URL": "postgresql://db.internal/boxoffice", "REDIS_URL": "redis://redis.internal:6379/0"}


def _write(path: Path, text: str) -> None:
    """Write and move the modification time on, as a Secret's update does."""
    path.write_text(text)
    stamp = time.time_ns() + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


class _Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_file_secret_is_re_read_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    _write(path, "one")
    ticks = _Ticks()
    source = SecretSource("S", "one", path=str(path), parse=str.upper, check_interval_seconds=1.0, monotonic=ticks)
    _write(path, "two")
    assert source.get() == "one"  # not looked at before the interval
    ticks.now = 1.0
    assert source.get() == "TWO"
    # A bad version (unreadable) keeps the last good value; a good one is taken.
    path.unlink()
    ticks.now = 2.0
    assert source.get() == "TWO"
    _write(path, "three")
    ticks.now = 3.0
    assert source.get() == "THREE"


def test_token_keys_from_a_file_rotate_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "token-keys"
    _write(path, K1 + "\n")
    config = TokenConfig.from_env(Env({"BOXOFFICE_TOKEN_KEYS_FILE": str(path)}))
    clock = ManualClock()
    signer = config.signer(clock)
    old, _ = signer.issue(event_id=1, customer_id="ann", ttl_seconds=600)
    assert old.split(".")[1] == "k1"
    # The rotation: the new key first (it signs), the old one still listed.
    _write(path, f"{K2}\n{K1}\n")
    time.sleep(1.05)  # the file is looked at once a second
    new, _ = signer.issue(event_id=1, customer_id="ann", ttl_seconds=600)
    assert new.split(".")[1] == "k2"
    assert signer.verify(new, event_id=1).customer_id == "ann"
    assert signer.verify(old, event_id=1).customer_id == "ann"
    assert config.active_kid == "k2" and set(config.keys) == {"k1", "k2"}
    # The old key retired: its tokens stop verifying.
    _write(path, K2)
    time.sleep(1.05)
    with pytest.raises(Unauthenticated) as caught:
        signer.verify(old, event_id=1)
    assert caught.value.reason == "TOKEN_UNKNOWN_KEY"
    assert signer.verify(new, event_id=1).customer_id == "ann"


def test_webhook_secrets_from_a_file_rotate_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "webhook-secrets"
    old, new = "whsec_old_0123456789abcdef", "whsec_new_0123456789abcdef"
    _write(path, old)
    config = PaymentConfig.from_env(Env({"BOXOFFICE_WEBHOOK_SECRETS_FILE": str(path)}))
    clock = ManualClock()
    verifier = WebhookVerifier(config.webhook_secret_source.get, clock)
    body = b'{"id":"evt_1"}'
    now = int(clock.now())
    verifier.verify(signature_header([old], now, body), body)
    _write(path, f"{new},{old}")
    time.sleep(1.05)
    verifier.verify(signature_header([new], now, body), body)
    verifier.verify(signature_header([old], now, body), body)
    assert config.webhook_secrets == (new, old)


@pytest.mark.parametrize(
    ("environ", "needle"),
    [
        ({"BOXOFFICE_TOKEN_KEYS": K1, "BOXOFFICE_TOKEN_KEYS_FILE": "/x"}, "both set"),
        ({"BOXOFFICE_TOKEN_KEYS_FILE": "/nonexistent/token-keys"}, "BOXOFFICE_TOKEN_KEYS_FILE='/nonexistent"),
    ],
)
def test_bad_secret_settings_are_config_errors(environ: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        TokenConfig.from_env(Env(environ))


def test_a_secret_file_that_does_not_parse_names_its_variable(tmp_path: Path) -> None:
    path = tmp_path / "token-keys"
    _write(path, "k1:short")
    with pytest.raises(ConfigError, match=r"BOXOFFICE_TOKEN_KEYS_FILE=.*at least 16"):
        TokenConfig.from_env(Env({"BOXOFFICE_TOKEN_KEYS_FILE": str(path)}))


def test_production_refuses_the_development_secrets(tmp_path: Path) -> None:
    """The issue's finding: with DATABASE_URL and REDIS_URL set and no keys,
    every role started on the development token key and webhook secret."""
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_TOKEN_KEYS .*BOXOFFICE_TOKEN_KEYS_FILE"):
        refuse_development_secrets(Env(PRODUCTION), on_embedded_stores=False)
    assert development_secrets_in_use(Env(PRODUCTION)) == [
        "BOXOFFICE_TOKEN_KEYS",
        "BOXOFFICE_WEBHOOK_SECRETS",
        "BOXOFFICE_EDGE_SESSION_KEYS",
        "BOXOFFICE_CHECKIN_KEYS",
    ]
    keyed = {**PRODUCTION, "BOXOFFICE_TOKEN_KEYS": K1}
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_WEBHOOK_SECRETS "):
        refuse_development_secrets(Env(keyed), on_embedded_stores=False, components=["payment"])
    # Each process is refused only what it reads: the queue reads no webhook secret.
    refuse_development_secrets(Env(keyed), on_embedded_stores=False, components=["queue"])
    # The development values set explicitly, or in a mounted file, are refused too.
    explicit = {
        **keyed,
        "BOXOFFICE_TOKEN_KEYS": f"{K1},dev:{DEV_TOKEN_KEY}",
        "BOXOFFICE_WEBHOOK_SECRETS": "whsec_0123456789abcdef",
    }
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_TOKEN_KEYS "):
        refuse_development_secrets(Env(explicit), on_embedded_stores=False)
    path = tmp_path / "webhook-secrets"
    _write(path, DEV_WEBHOOK_SECRET)
    mounted = {**keyed, "BOXOFFICE_WEBHOOK_SECRETS_FILE": str(path)}
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_WEBHOOK_SECRETS "):
        refuse_development_secrets(Env(mounted), on_embedded_stores=False, components=["payment"])
    sandbox = {**keyed, "BOXOFFICE_WEBHOOK_SECRETS": "whsec_0123456789abcdef"}
    sandbox["BOXOFFICE_SANDBOX_WEBHOOK_SECRET"] = DEV_WEBHOOK_SECRET
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_SANDBOX_WEBHOOK_SECRET "):
        refuse_development_secrets(Env(sandbox), on_embedded_stores=False)
    # Real secrets pass, once the payment provider is named.
    configured = {
        **keyed,
        "BOXOFFICE_WEBHOOK_SECRETS": "whsec_0123456789abcdef",
        "BOXOFFICE_EDGE_SESSION_KEYS": "s1:0123456789abcdef0123",
    }
    # The ticket issuer (a payment role) signs ticket codes with a check-in key.
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_CHECKIN_KEYS "):
        refuse_development_secrets(Env(configured), on_embedded_stores=False, components=["payment"])
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_CHECKIN_KEYS "):
        refuse_development_secrets(
            Env({**configured, "BOXOFFICE_CHECKIN_KEYS": f"c1:{'ab' * 32},dev:{DEV_CHECKIN_SEED}"}),
            on_embedded_stores=False,
            components=["payment"],
        )
    configured["BOXOFFICE_CHECKIN_KEYS"] = f"c1:{'ab' * 32}"
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_PAYMENT_PROVIDER is unset.*takes no money"):
        refuse_development_secrets(Env(configured), on_embedded_stores=False)
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_PAYMENT_PROVIDER "):
        refuse_development_secrets(Env(configured), on_embedded_stores=False, components=["payment"])
    refuse_development_secrets(Env(configured), on_embedded_stores=False, components=["queue", "edge"])
    refuse_development_secrets(Env({}), on_embedded_stores=True)  # a laptop: the sandbox by default
    for provider in ("sandbox", "stripe"):
        named = {**configured, "BOXOFFICE_PAYMENT_PROVIDER": provider}
        refuse_development_secrets(Env(named), on_embedded_stores=False)


def test_production_refuses_the_edges_development_sign_in_and_session_key() -> None:
    """Development sign-in lets anyone in as anyone: only on the embedded stores."""
    edge = {**PRODUCTION, "BOXOFFICE_EDGE_SESSION_KEYS": "s1:0123456789abcdef0123"}
    refuse_development_secrets(Env(edge), on_embedded_stores=False, components=["edge"])
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_EDGE_DEV_SIGNIN is on"):
        refuse_development_secrets(
            Env({**edge, "BOXOFFICE_EDGE_DEV_SIGNIN": "true"}), on_embedded_stores=False, components=["edge"]
        )
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_EDGE_SESSION_KEYS "):
        refuse_development_secrets(Env(PRODUCTION), on_embedded_stores=False, components=["edge"])
    # A queue process does not read the edge's settings.
    refuse_development_secrets(
        Env({**PRODUCTION, "BOXOFFICE_TOKEN_KEYS": K1, "BOXOFFICE_EDGE_DEV_SIGNIN": "true"}),
        on_embedded_stores=False,
        components=["queue"],
    )
    refuse_development_secrets(Env({"BOXOFFICE_EDGE_DEV_SIGNIN": "true"}), on_embedded_stores=True)


def test_the_embedded_stores_may_use_the_development_secrets() -> None:
    refuse_development_secrets(Env({}), on_embedded_stores=True)
    config = TokenConfig.from_env(Env({}))
    assert config.keys == {"dev": DEV_TOKEN_KEY.encode()} and config.active_kid == "dev"
    assert PaymentConfig.from_env(Env({})).webhook_secrets == (DEV_WEBHOOK_SECRET,)
