"""A PNG's pixels as 8-bit grey, for zxing-cpp (greyscale and palette
images of any bit depth, not interlaced: what QR libraries write). No
imaging library is installed; the format is short enough to read here."""

from __future__ import annotations

import struct
import zlib


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def grey_pixels(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and one byte of grey per pixel."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, palette = 8, b"", b""
    width = height = depth = colour = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert colour in (0, 3) and interlace == 0, "only grey or palette, not interlaced"
        elif kind == b"PLTE":
            palette = body
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = (width * depth + 7) // 8
    unit = max(1, depth // 8)
    rows: list[bytearray] = []
    previous = bytearray(stride)
    at = 0
    for _ in range(height):
        method, line = raw[at], bytearray(raw[at + 1 : at + 1 + stride])
        at += 1 + stride
        for i in range(stride):
            left = line[i - unit] if i >= unit else 0
            up = previous[i]
            corner = previous[i - unit] if i >= unit else 0
            line[i] = (line[i] + (0, left, up, (left + up) // 2, _paeth(left, up, corner))[method]) & 0xFF
        rows.append(line)
        previous = line
    out = bytearray()
    top = (1 << depth) - 1
    for line in rows:
        for x in range(width):
            bit = x * depth
            value = (line[bit // 8] >> (8 - depth - bit % 8)) & top if depth < 8 else line[x]
            if colour == 3:
                r, g, b = palette[3 * value : 3 * value + 3]
                out.append((r + g + b) // 3)
            else:
                out.append(value * 255 // top)
    return width, height, bytes(out)
