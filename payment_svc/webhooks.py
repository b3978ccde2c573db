"""Provider webhooks: the signature header and the event body.

Header: ``t=<unix seconds>,v1=<hex hmac-sha256 of "<t>.<body>">``; during a
secret rotation the provider may send several ``v1=`` entries, and the
service accepts any secret it is configured with. Comparison is constant
time; a timestamp further than the tolerance from now is refused, so that a
captured delivery cannot be replayed later.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from boxoffice import boundedjson
from boxoffice.clock import Clock
from boxoffice.errors import InvalidArgument, Unauthenticated

MAX_BODY_BYTES = 64 * 1024
_MAX_HEADER = 2048


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The hex signature of one delivery."""
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(secrets: Sequence[str], timestamp: int, body: bytes) -> str:
    """``t=...,v1=...[,v1=...]``: one ``v1`` per secret."""
    return ",".join([f"t={timestamp}", *(f"v1={sign(s, timestamp, body)}" for s in secrets)])


def _failure(reason: str, message: str) -> Unauthenticated:
    return Unauthenticated(message, reason=reason)


class WebhookVerifier:
    """Checks a delivery's signature and age against every configured
    secret: fixed, or ``secrets()``'s at each delivery (secrets that follow a
    mounted Secret, see :mod:`boxoffice.secrets`)."""

    def __init__(
        self, secrets: Sequence[str] | Callable[[], Sequence[str]], clock: Clock, tolerance_seconds: int = 300
    ) -> None:
        if callable(secrets):
            self._secrets = secrets
        else:
            fixed = tuple(secrets)
            self._secrets = lambda: fixed
        if not self._secrets():
            raise ValueError("at least one webhook secret is required")
        self._clock = clock
        self._tolerance = tolerance_seconds

    def verify(self, header: str, body: bytes) -> None:
        """Returns when genuine and fresh; else UNAUTHENTICATED with reason
        WEBHOOK_SIGNATURE_MISSING, _MALFORMED, _INVALID or WEBHOOK_STALE."""
        if not header:
            raise _failure("WEBHOOK_SIGNATURE_MISSING", "the webhook carries no signature")
        if len(header) > _MAX_HEADER:
            raise _failure("WEBHOOK_SIGNATURE_MALFORMED", "the webhook signature header is too long")
        timestamp: int | None = None
        candidates: list[bytes] = []
        for part in header.split(","):
            name, sep, value = part.strip().partition("=")
            if not sep:
                raise _failure("WEBHOOK_SIGNATURE_MALFORMED", "the webhook signature header is malformed")
            if name == "t":
                if timestamp is not None or not value.isdigit() or len(value) > 12:
                    raise _failure("WEBHOOK_SIGNATURE_MALFORMED", "the webhook timestamp is malformed")
                timestamp = int(value)
            elif name == "v1":
                candidates.append(value.encode())
            # Other schemes (v0, future ones) are ignored, as providers advise.
        if timestamp is None or not candidates:
            raise _failure("WEBHOOK_SIGNATURE_MALFORMED", "the webhook signature header lacks t= or v1=")
        signed = f"{timestamp}.".encode() + body
        genuine = False
        for secret in self._secrets():
            expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest().encode()
            for candidate in candidates:
                # Evaluate every pair: the time taken says nothing about which matched.
                genuine = hmac.compare_digest(expected, candidate) or genuine
        if not genuine:
            raise _failure("WEBHOOK_SIGNATURE_INVALID", "the webhook signature does not verify")
        age = self._clock.now() - timestamp
        if abs(age) > self._tolerance:
            raise Unauthenticated(
                "the webhook timestamp is outside the tolerance",
                reason="WEBHOOK_STALE",
                metadata={"timestamp": str(timestamp), "tolerance_seconds": str(self._tolerance)},
            )


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """A provider notification, parsed."""

    event_id: str
    type: str
    created: int
    # The charge or refund the event is about.
    data: dict[str, Any]

    @property
    def payment_id(self) -> str:
        metadata = self.data.get("metadata")
        if isinstance(metadata, dict):
            value = metadata.get("payment_id")
            if isinstance(value, str):
                return value
        return ""

    def to_body(self) -> bytes:
        return json.dumps(
            {"id": self.event_id, "type": self.type, "created": self.created, "data": self.data},
            separators=(",", ":"),
            sort_keys=True,
        ).encode()


# What a provider's webhook reader turns deliveries into (the sandbox sends these).
EVENT_TYPES = frozenset(
    {
        "charge.succeeded",
        "charge.failed",
        "charge.refunded",
        "refund.failed",
        "charge.dispute.created",
        "charge.pending",
    }
)


def parse_event(body: bytes) -> WebhookEvent:
    """The event of a verified body; INVALID_ARGUMENT when malformed."""

    def bad(message: str) -> InvalidArgument:
        return InvalidArgument(message, reason="WEBHOOK_MALFORMED")

    try:
        # Bounded: a signed body nested thousands deep is malformed, not a RecursionError.
        raw = boundedjson.loads(body, max_bytes=MAX_BODY_BYTES, max_depth=32)
    except ValueError as err:
        raise bad("the webhook body is not JSON") from err
    if not isinstance(raw, dict):
        raise bad("the webhook body is not an object")
    event_id, kind, created, data = raw.get("id"), raw.get("type"), raw.get("created"), raw.get("data")
    if not isinstance(event_id, str) or not 1 <= len(event_id) <= 255:
        raise bad("the webhook has no event id")
    if not isinstance(kind, str) or not kind:
        raise bad("the webhook has no type")
    if not isinstance(created, int):
        raise bad("the webhook has no creation time")
    if not isinstance(data, dict):
        raise bad("the webhook has no data")
    return WebhookEvent(event_id=event_id, type=kind, created=created, data=data)


class SignedWebhooks:
    """The sandbox's deliveries (the :class:`~payment_svc.ports.WebhookReader`):
    verified by :class:`WebhookVerifier`, bodies already in our shape."""

    def __init__(self, verifier: WebhookVerifier) -> None:
        self._verifier = verifier

    def read(self, signature: str, body: bytes) -> WebhookEvent:
        self._verifier.verify(signature, body)
        return parse_event(body)
