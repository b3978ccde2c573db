"""The client identity in Envoy's ``x-forwarded-client-cert`` header.

The header is a comma-separated list of elements, one per proxy hop, each
``Key=value`` pairs separated by ``;`` (values may be double-quoted, with
``\\"`` inside). The last element is what the sidecar in front of this
process saw of its peer; its ``URI`` is that peer's SPIFFE ID. Trust it
only behind a sidecar that sets the header itself (Istio, Envoy with
``forward_client_cert_details`` SANITIZE_SET or APPEND_FORWARD).
"""

from __future__ import annotations

# A header longer than this is not a sidecar's.
_MAX_LENGTH = 16_384


def _split(text: str, separator: str) -> list[str]:
    """Splits on ``separator`` outside double quotes."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\" and quoted:
            current.append(char)
            escaped = True
        elif char == '"':
            current.append(char)
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"')
    return value


def identity_from_xfcc(header: str) -> str | None:
    """The ``URI`` of the header's last element, or None."""
    if not header or len(header) > _MAX_LENGTH:
        return None
    last = _split(header, ",")[-1]
    for pair in _split(last, ";"):
        key, sep, value = pair.strip().partition("=")
        if sep and key.strip().lower() == "uri":
            uri = _unquote(value.strip())
            return uri or None
    return None
