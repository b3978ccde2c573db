"""Argument types the commands share."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    """A whole number of at least 1 (an event id, a count)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (a whole number is wanted)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive (at least 1)")
    return value
