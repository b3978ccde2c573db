"""Structured logs: one JSON object a line on stderr, with the trace,
span and request ids of the call or request being handled."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from boxoffice.tracing import current_ids

_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Formats a record and its ``extra=`` fields as one JSON object, with
    the process's own ``fields`` (which copy of a role it is) in every line."""

    def __init__(self, fields: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self._fields = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **self._fields,
        }
        # The ids of the call or request being handled (its own fields win).
        trace_id, span_id, request_id = current_ids()
        if trace_id is not None:
            entry["trace_id"] = trace_id
            entry["span_id"] = span_id
        if request_id is not None:
            entry["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str = "info", fields: Mapping[str, Any] | None = None) -> None:
    """Send every logger's records to stderr as JSON lines (each with
    ``fields``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(fields))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Warnings (an unpublished error reason, say) become log lines too.
    logging.captureWarnings(True)


class LogBudget:
    """At most ``per_second`` lines a second of one kind: under a flood the
    rest are counted, and the next line logged says how many were left out
    (:meth:`left_out`)."""

    def __init__(self, per_second: int, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._per_second = per_second
        self._monotonic = monotonic
        self._window = -1
        self._count = 0
        self._left_out = 0

    def allow(self) -> bool:
        now = int(self._monotonic())
        if now != self._window:
            self._window, self._count = now, 0
        self._count += 1
        if self._count > self._per_second:
            self._left_out += 1
            return False
        return True

    def left_out(self) -> dict[str, int]:
        """``{"not_logged_since": n}`` for the lines left out since the last
        one logged (empty when none), to add to the line's fields."""
        left_out, self._left_out = self._left_out, 0
        return {"not_logged_since": left_out} if left_out else {}
