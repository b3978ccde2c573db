"""The payment provider as the service sees it: charges and refunds keyed by
idempotency keys, so that a repeated call never moves money twice."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


class ChargeStatus(enum.StrEnum):
    CAPTURED = "CAPTURED"
    DECLINED = "DECLINED"
    FAILED = "FAILED"
    # Accepted, outcome not known yet (it comes by webhook or a later look-up).
    PROCESSING = "PROCESSING"


@dataclass(frozen=True, slots=True)
class ChargeRequest:
    idempotency_key: str
    amount_minor: int
    currency: str
    payment_method: str
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ChargeResult:
    charge_id: str
    status: ChargeStatus
    amount_minor: int
    currency: str
    failure_code: str = ""


class RefundStatus(enum.StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class RefundRequest:
    idempotency_key: str
    charge_id: str
    amount_minor: int
    currency: str


@dataclass(frozen=True, slots=True)
class RefundResult:
    refund_id: str
    status: RefundStatus
    amount_minor: int
    failure_code: str = ""


class ProviderError(Exception):
    """The provider refused the request itself (not a decline): a bad
    parameter, a reused key. Retrying the same request does not help."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class PaymentProvider(Protocol):
    """A card processor. Calls may hang: callers bound them with a timeout
    and retry with the same key, which returns the first result."""

    async def charge(self, request: ChargeRequest) -> ChargeResult:
        """Charge once per key; a repeat returns the first result."""

    async def retrieve_charge(self, idempotency_key: str) -> ChargeResult | None:
        """The charge made with this key, or None if none reached the provider."""

    async def refund(self, request: RefundRequest) -> RefundResult:
        """Refund once per key; a repeat returns the first result."""
