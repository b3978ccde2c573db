"""Fixtures of the check-in tests."""

from tests.checkin.harness import door

__all__ = ["door"]
