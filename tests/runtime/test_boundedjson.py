"""JSON from outside read within bounds: depth counted outside strings,
every refusal a ValueError (Unreadable) and never a RecursionError."""

from __future__ import annotations

import pytest

from boxoffice import boundedjson
from boxoffice.boundedjson import Unreadable


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (b"1", 0),
        (b"{}", 1),
        (b'[[1], {"a": [2]}]', 3),
        (b'"[[[["', 0),
        (b'["\\"[[", "]"]', 1),
        (b'["\\\\", [[]]]', 3),
        (b'{"a": "{{{{\\u005b"}', 1),
        (b"[" * 100 + b"]" * 100, 100),
    ],
)
def test_depth_counts_brackets_outside_strings(document: bytes, expected: int) -> None:
    assert boundedjson.depth(document) == expected


def test_depth_stops_past_the_bound() -> None:
    assert boundedjson.depth(b"[" * 5000, beyond=32) == 33


def test_a_document_within_bounds_is_read() -> None:
    document = b'{"a": [1, {"b": "[[[["}], "c": "\\ud83c\\udfab"}'
    assert boundedjson.loads(document, max_bytes=100, max_depth=3) == {"a": [1, {"b": "[[[["}], "c": "\U0001f3ab"}
    assert boundedjson.loads('{"name": "\u00e9"}', max_bytes=100) == {"name": "\u00e9"}


@pytest.mark.parametrize(
    ("document", "why"),
    [
        (b"[" * 2500 + b"]" * 2500, "deeper"),
        (b"[" * 40 + b"]" * 40, "deeper"),
        (b'{"a": "' + b"x" * 20_000 + b'"}', "longer"),
        (b"\xff\xfe", "UTF-8"),
        (b'{"a": 1', "not JSON"),
        (b"", "not JSON"),
        ("lone \ud800", "UTF-8"),
    ],
)
def test_what_cannot_be_read_is_unreadable(document: bytes | str, why: str) -> None:
    with pytest.raises(Unreadable, match=why):
        boundedjson.loads(document, max_bytes=10_000, max_depth=32)
