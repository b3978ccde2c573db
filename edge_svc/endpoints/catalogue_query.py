"""``GET /v1/events``' query string: each parameter checked here, a bad one
answered 400 naming it (``pageSize``, ``date``, ...), before any call; the
checked query is also the cache key, so that the same search spelled in
another order, case or with defaults written out shares one load.

Parameters: ``q`` (words), ``kind`` (``concert`` / ``flight``), ``origin``,
``destination`` (IATA codes, any case), ``date`` (``YYYY-MM-DD``, a local
date in each event's own zone), ``startsAfter``, ``startsBefore`` (RFC 3339
with a zone), ``pageSize`` (1-100, default 20), ``pageToken``. The request
message's own JSON names, which the OpenAPI document lists, are taken too:
``query`` for ``q``, ``localDate`` for ``date``, and ``kind`` as
``EVENT_KIND_CONCERT`` / ``EVENT_KIND_FLIGHT`` (``EVENT_KIND_UNSPECIFIED``: any).
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from datetime import date, datetime

from google.protobuf import timestamp_pb2
from starlette.datastructures import QueryParams

from boxoffice.errors import InvalidArgument
from gen.boxoffice.booking.v1 import booking_service_pb2 as booking_pb

PARAMETERS = ("q", "kind", "origin", "destination", "date", "startsAfter", "startsBefore", "pageSize", "pageToken")
# The request message's JSON names of two of them.
_ALIASES = {"query": "q", "localDate": "date"}
DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
_KINDS = {
    "concert": booking_pb.EVENT_KIND_CONCERT,
    "flight": booking_pb.EVENT_KIND_FLIGHT,
    "event_kind_concert": booking_pb.EVENT_KIND_CONCERT,
    "event_kind_flight": booking_pb.EVENT_KIND_FLIGHT,
    "event_kind_unspecified": booking_pb.EVENT_KIND_UNSPECIFIED,
}
_IATA = re.compile(r"[A-Za-z]{3}")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DIGITS = re.compile(r"[0-9]{1,3}")
# RFC 3339: a date, "T" (or a space), a time, and a zone.
_INSTANT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)
_MAX_QUERY = 200
_MAX_TOKEN = 2048


def _bad(field: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"{field}: {message}", reason="INVALID_FIELD", metadata={"field": field})


def _instant(field: str, text: str) -> timestamp_pb2.Timestamp:
    if not _INSTANT.fullmatch(text):
        raise _bad(field, "must be an RFC 3339 time with its zone, e.g. 2026-12-20T00:00:00+07:00")
    out = timestamp_pb2.Timestamp()
    try:
        # In UTC it must stay within years 1 to 9999 (a zone can push it out).
        out.FromDatetime(datetime.fromisoformat(text.upper().replace("Z", "+00:00")))
    except (ValueError, OverflowError):
        raise _bad(field, "is not a valid time") from None
    return out


def parse_events_query(params: QueryParams) -> tuple[Hashable, booking_pb.ListEventsRequest]:
    """The cache key and the ListEvents request of a query string."""
    unknown = sorted(set(params) - set(PARAMETERS) - set(_ALIASES))
    if unknown:
        raise _bad(unknown[0][:64], f"unknown query parameter {unknown[0][:64]!r}")
    given: dict[str, str] = {}
    for name in [*PARAMETERS, *_ALIASES]:
        values = params.getlist(name)
        canonical = _ALIASES.get(name, name)
        if len(values) > 1 or (values and canonical in given):
            raise _bad(name, "is given more than once")
        if values:
            given[canonical] = values[0]
    params = QueryParams(given)
    request = booking_pb.ListEventsRequest()
    words = params.get("q", "")
    if len(words) > _MAX_QUERY or any(ord(ch) < 0x20 or ch == "\x7f" for ch in words):
        raise _bad("q", f"must be at most {_MAX_QUERY} characters of text")
    # Spaces and case do not change the answer; one entry serves them all.
    request.query = " ".join(words.split()).lower()
    kind = params.get("kind", "")
    if kind:
        if kind.lower() not in _KINDS:
            raise _bad("kind", "must be concert or flight")
        request.kind = _KINDS[kind.lower()]
    for name in ("origin", "destination"):
        code = params.get(name, "")
        if code:
            if not _IATA.fullmatch(code):
                raise _bad(name, "must be a 3-letter IATA airport code such as SGN")
            setattr(request, name, code.upper())
    local = params.get("date", "")
    if local:
        try:
            if not _DATE.fullmatch(local):
                raise ValueError
            date.fromisoformat(local)
        except ValueError:
            raise _bad("date", "must be a date as YYYY-MM-DD") from None
        request.local_date = local
    for name, field in (("startsAfter", "starts_after"), ("startsBefore", "starts_before")):
        text = params.get(name, "")
        if text:
            getattr(request, field).CopyFrom(_instant(name, text))
    if request.HasField("starts_after") and request.HasField("starts_before"):
        if request.starts_before.ToNanoseconds() <= request.starts_after.ToNanoseconds():
            raise _bad("startsBefore", "must be after startsAfter")
    size = params.get("pageSize", "")
    if size:
        if not _DIGITS.fullmatch(size) or not 1 <= int(size) <= MAX_PAGE_SIZE:
            raise _bad("pageSize", f"must be a whole number from 1 to {MAX_PAGE_SIZE}")
    request.page_size = int(size) if size else DEFAULT_PAGE_SIZE
    token = params.get("pageToken", "")
    if len(token) > _MAX_TOKEN or not token.isascii():
        raise _bad("pageToken", "is not a page token of this listing")
    request.page_token = token
    return request.SerializeToString(deterministic=True), request
