"""Input checks shared by the servicers. Each failure is INVALID_ARGUMENT
with reason INVALID_FIELD (or FIELD_REQUIRED) and the field in metadata."""

from __future__ import annotations

import re

from boxoffice.errors import InvalidArgument

_INT64_MAX = 2**63 - 1


def required(field: str, message: str | None = None) -> InvalidArgument:
    return InvalidArgument(message or f"{field} is required", reason="FIELD_REQUIRED", metadata={"field": field})


def invalid(field: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"{field}: {message}", reason="INVALID_FIELD", metadata={"field": field})


def positive_id(field: str, value: int) -> int:
    if value == 0:
        raise required(field, f"{field} is required (a positive id)")
    if value < 0 or value > _INT64_MAX:
        raise invalid(field, f"must be a positive id, got {value}")
    return value


def text(
    field: str, value: str, *, max_length: int, min_length: int = 1, pattern: re.Pattern[str] | None = None
) -> str:
    if min_length > 0 and value == "":
        raise required(field)
    if len(value) < min_length:
        raise invalid(field, f"must be at least {min_length} characters")
    if len(value) > max_length:
        raise invalid(field, f"must be at most {max_length} characters, got {len(value)}")
    if any(ord(ch) < 0x20 or ch == "\x7f" for ch in value):
        raise invalid(field, "must not contain control characters")
    if pattern is not None and value and not pattern.fullmatch(value):
        raise invalid(field, f"must match {pattern.pattern}")
    return value


def int_range(field: str, value: int, *, minimum: int, maximum: int) -> int:
    if value < minimum or value > maximum:
        raise invalid(field, f"must be between {minimum} and {maximum}, got {value}")
    return value
