from __future__ import annotations

import pytest

from boxoffice.errors import PermissionDenied, Unauthenticated
from boxoffice.tokens import TokenSigner
from tests.support import ManualClock

KEYS = {"k1": b"0123456789abcdef-one", "k2": b"0123456789abcdef-two"}


def test_issued_token_verifies_and_names_the_customer() -> None:
    clock = ManualClock()
    signer = TokenSigner(KEYS, "k1", clock)
    token, claims = signer.issue(event_id=7, customer_id="cust-1", ttl_seconds=60)
    verified = signer.verify(token, event_id=7)
    assert verified == claims
    assert verified.customer_id == "cust-1"
    assert verified.expires_at == int(clock.now()) + 60


def test_rotation_old_key_still_verifies() -> None:
    clock = ManualClock()
    old = TokenSigner(KEYS, "k1", clock)
    new = TokenSigner(KEYS, "k2", clock)
    token, _ = old.issue(event_id=1, customer_id="c", ttl_seconds=60)
    assert new.verify(token, event_id=1).customer_id == "c"


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda t: "", "TOKEN_MISSING"),
        (lambda t: "garbage", "TOKEN_INVALID"),
        (lambda t: t[:-2] + ("AA" if t[-2:] != "AA" else "BB"), "TOKEN_INVALID"),
        (lambda t: t.replace("v1.k1.", "v1.nope."), "TOKEN_UNKNOWN_KEY"),
        (lambda t: "v2" + t[2:], "TOKEN_INVALID"),
        (lambda t: t + "x" * 2000, "TOKEN_INVALID"),
    ],
)
def test_bad_tokens_are_unauthenticated(mutate: object, reason: str) -> None:
    signer = TokenSigner(KEYS, "k1", ManualClock())
    token, _ = signer.issue(event_id=1, customer_id="c", ttl_seconds=60)
    with pytest.raises(Unauthenticated) as err:
        signer.verify(mutate(token), event_id=1)  # type: ignore[operator]
    assert err.value.reason == reason


def test_forged_payload_with_other_customer_fails() -> None:
    signer = TokenSigner(KEYS, "k1", ManualClock())
    token, _ = signer.issue(event_id=1, customer_id="alice", ttl_seconds=60)
    other, _ = signer.issue(event_id=1, customer_id="mallory", ttl_seconds=60)
    v, kid, _, sig = token.split(".")
    forged = ".".join([v, kid, other.split(".")[2], sig])
    with pytest.raises(Unauthenticated):
        signer.verify(forged, event_id=1)


def test_token_signed_with_another_secret_fails() -> None:
    mine = TokenSigner(KEYS, "k1", ManualClock())
    theirs = TokenSigner({"k1": b"attacker-secret-0123456"}, "k1", ManualClock())
    token, _ = theirs.issue(event_id=1, customer_id="c", ttl_seconds=60)
    with pytest.raises(Unauthenticated) as err:
        mine.verify(token, event_id=1)
    assert err.value.reason == "TOKEN_INVALID"


def test_expired_token_fails() -> None:
    clock = ManualClock()
    signer = TokenSigner(KEYS, "k1", clock)
    token, _ = signer.issue(event_id=1, customer_id="c", ttl_seconds=60)
    clock.advance(66)
    with pytest.raises(Unauthenticated) as err:
        signer.verify(token, event_id=1)
    assert err.value.reason == "TOKEN_EXPIRED"


def test_other_event_is_permission_denied() -> None:
    signer = TokenSigner(KEYS, "k1", ManualClock())
    token, _ = signer.issue(event_id=1, customer_id="c", ttl_seconds=60)
    with pytest.raises(PermissionDenied) as err:
        signer.verify(token, event_id=2)
    assert err.value.reason == "TOKEN_WRONG_EVENT"
