"""Tests of the check-in service."""
