"""JSON from outside, read within bounds: a document past its size or
nesting depth, not UTF-8, or not JSON is :class:`Unreadable` (a
``ValueError``) before the parser spends a recursion level or a byte more
on it.

Python's parser recurses once per nesting level: a bearer token, cookie or
body of ``[[[[...`` a few thousand deep raises ``RecursionError``, which no
``except ValueError`` catches. Every parser of what a client or a provider
sends goes through :func:`loads`, which counts the depth first (brackets
outside strings) and refuses a document deeper than ``max_depth``.
"""

from __future__ import annotations

import json
import re
from typing import Any

# The characters that decide nesting: brackets, and the quotes and escapes
# that say whether a bracket is inside a string.
_SPECIAL = re.compile(rb'[\[\]{}"\\]')
_OPENING = frozenset(b"[{")
_CLOSING = frozenset(b"]}")
_QUOTE = ord('"')
_ESCAPE = ord("\\")

# Deep enough for any document the mesh reads (a webhook nests 4 or 5).
DEFAULT_MAX_DEPTH = 32


class Unreadable(ValueError):
    """A JSON document that is not read: what is wrong with it, in words."""


def depth(data: bytes, *, beyond: int | None = None) -> int:
    """The deepest nesting of arrays and objects in ``data`` (brackets
    inside strings not counted), in one pass; a document that does not
    balance is measured all the same (the parser refuses it). With
    ``beyond``, the count stops at the first level past it."""
    brackets = data.count(b"[") + data.count(b"{")
    if brackets <= 1:
        return brackets
    deepest = level = 0
    in_string = False
    escaped_until = -1
    for match in _SPECIAL.finditer(data):
        at = match.start()
        if at < escaped_until:
            continue
        char = data[at]
        if in_string:
            if char == _ESCAPE:
                escaped_until = at + 2
            elif char == _QUOTE:
                in_string = False
        elif char == _QUOTE:
            in_string = True
        elif char in _OPENING:
            level += 1
            if level > deepest:
                deepest = level
                if beyond is not None and deepest > beyond:
                    break
        elif char in _CLOSING:
            level -= 1
    return deepest


def loads(data: bytes | str, *, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """The document in ``data``; :class:`Unreadable` when it is longer than
    ``max_bytes``, nested deeper than ``max_depth``, not UTF-8 or not JSON."""
    if isinstance(data, str):
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError:
            raise Unreadable("the document is not UTF-8") from None
    if len(data) > max_bytes:
        raise Unreadable(f"the document is longer than {max_bytes} bytes")
    if depth(data, beyond=max_depth) > max_depth:
        raise Unreadable(f"the document is nested deeper than {max_depth} levels")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise Unreadable("the document is not UTF-8") from None
    except (ValueError, RecursionError) as err:
        # RecursionError cannot happen within the depth above; kept as the last net.
        raise Unreadable(f"the document is not JSON: {str(err)[:200]}") from None
