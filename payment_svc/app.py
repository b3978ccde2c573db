"""Composition of the payment service's processes (filled in by its issue)."""

from __future__ import annotations

from collections.abc import Mapping

from boxoffice.db import Migration, load_migrations
from boxoffice.lifecycle import Component
from boxoffice.runtime import Runtime

COMPONENT = "payment"
DEFAULT_GRPC_PORT = 50053
ROLES: Mapping[str, str] = {"payment-svc": "server", "relay": "relay"}


def migrations() -> list[Migration]:
    return load_migrations(COMPONENT, "payment_svc")


async def build(rt: Runtime, role: str) -> list[Component]:
    return []


async def seed_demo(rt: Runtime) -> list[str]:
    return []
