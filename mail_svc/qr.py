"""A ticket's code as a QR image (PNG).

The symbol is segno's (error correction M). Two things make it cheap enough
for a crowd's e-mails, measured with ``python -m bench.mail_bench``:

- The mask pattern is fixed (``MASK``) instead of chosen by scoring all
  eight, which was about four fifths of segno's time per code. Every reader
  reads any of the eight masks; the score only steers away from patterns
  (large blocks, finder-like runs) that might trouble a weak one, and on
  codes like ours (a signature: random to a mask) the eight differ little:
  over 30 random codes of 275 characters, mask 2 scored on average 4% above
  the best of the eight (at most 16%), the least of any fixed mask with 7.
- The PNG is written here, one-bit greyscale, a row of modules packed into
  bytes at a time (a table spreads each byte to ``scale`` pixels), instead
  of segno's writer, which walks the image pixel by pixel in Python.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from functools import lru_cache

import segno

MASK = 2
SCALE = 6
BORDER = 4

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A module as a bit of the image: light is white (1), dark is black (0).
_BITS = bytes.maketrans(b"\x00\x01", b"10")


def qr_png(code: str) -> bytes:
    """``code`` as a QR image: ``SCALE`` pixels a module, a quiet zone of ``BORDER`` modules."""
    symbol = segno.make(code, error="m", micro=False, mask=MASK)
    return png(symbol.matrix, scale=SCALE, border=BORDER)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


@lru_cache(maxsize=4)
def _spread(scale: int) -> tuple[bytes, ...]:
    """Each byte of eight modules' bits as ``scale`` bytes of pixels."""
    return tuple(
        int("".join(("1" if byte >> (7 - i) & 1 else "0") * scale for i in range(8)), 2).to_bytes(scale, "big")
        for byte in range(256)
    )


def png(matrix: Sequence[bytes | bytearray], *, scale: int, border: int) -> bytes:
    """A square matrix of modules (1 dark, 0 light) as a one-bit greyscale PNG."""
    modules = len(matrix) + 2 * border
    width = modules * scale
    row_bytes = (width + 7) // 8
    packed_bytes = (modules + 7) // 8
    spread = _spread(scale)
    quiet = bytes(border)
    tail = quiet + bytes(packed_bytes * 8 - modules)
    # Each scan line starts with its filter type, 0 (none).
    blank = b"\x00" + b"\xff" * row_bytes
    lines = [blank * (border * scale)]
    for row in matrix:
        bits = int((quiet + bytes(row) + tail).translate(_BITS), 2).to_bytes(packed_bytes, "big")
        line = b"\x00" + b"".join([spread[byte] for byte in bits])[:row_bytes]
        lines.append(line * scale)
    lines.append(blank * (border * scale))
    header = struct.pack(">IIBBBBB", width, width, 1, 0, 0, 0, 0)  # 1 bit, greyscale, no interlace
    return b"".join(
        (
            _SIGNATURE,
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(b"".join(lines))),
            _chunk(b"IEND", b""),
        )
    )
