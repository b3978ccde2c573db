"""Timestamps between the wire and the model."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import timestamp_pb2

from boxoffice import validate


def timestamp(field: str, value: timestamp_pb2.Timestamp) -> datetime:
    if not 0 <= value.nanos < 1_000_000_000 or not -62135596800 <= value.seconds <= 253402300799:
        raise validate.invalid(field, "is not a valid timestamp")
    return value.ToDatetime(tzinfo=UTC)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ts(value: datetime) -> timestamp_pb2.Timestamp:
    # Exact integer arithmetic, a few times cheaper than FromDatetime (which
    # goes through a time tuple); naive values are taken as UTC, as there.
    since = (value if value.tzinfo is not None else value.replace(tzinfo=UTC)) - _EPOCH
    return timestamp_pb2.Timestamp(seconds=since.days * 86400 + since.seconds, nanos=since.microseconds * 1000)
