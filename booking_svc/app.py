"""Composition of the booking service's processes (filled in by its issue)."""

from __future__ import annotations

from collections.abc import Mapping

from boxoffice.db import Migration, load_migrations
from boxoffice.lifecycle import Component
from boxoffice.runtime import Runtime

COMPONENT = "booking"
DEFAULT_GRPC_PORT = 50052
ROLES: Mapping[str, str] = {"booking-svc": "server", "sweeper": "sweeper"}


def migrations() -> list[Migration]:
    return load_migrations(COMPONENT, "booking_svc")


async def build(rt: Runtime, role: str) -> list[Component]:
    return []


async def seed_demo(rt: Runtime) -> list[str]:
    return []
