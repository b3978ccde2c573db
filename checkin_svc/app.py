"""The check-in service's composition root: the one place its objects are built.

One role (``ROLES``): ``checkin`` (role ``server``), CheckInService (the
door: gate devices' scans, check-in lists and offline uploads, the public
keys, a ticket's rotation secret) and CheckInAdminService (gate devices),
on the tickets' Postgres with the check-ins' own tables. It verifies codes
with the check-in keys (``BOXOFFICE_CHECKIN_KEYS`` or ``_FILE``, as the
issuer signs them), and signs a code only for a ticket of before signed
codes whose fan asks for its rotating code. Tests and benchmarks build
through :func:`compose_server`, replacing only what they must.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from boxoffice import audit, ticketcodes
from boxoffice.config import Env
from boxoffice.db import Migration, load_migrations
from boxoffice.lifecycle import Component
from boxoffice.runtime import Runtime
from boxoffice.secrets import SecretSource
from boxoffice.server import GrpcServer
from checkin_svc.adapters.events import PgEventSettings, ReEntryOf, StaticCodesOf
from checkin_svc.adapters.postgres import PgCheckInStore, PgGateDeviceStore
from checkin_svc.admin_servicer import CheckInAdminServicer
from checkin_svc.gate import DeviceKeys
from checkin_svc.handler import CheckInHandler
from checkin_svc.metrics import CheckInMetrics
from checkin_svc.ports import ReEntry, StaticCodes
from checkin_svc.servicer import CheckInServicer, Rotations

COMPONENT = "checkin"
DEFAULT_GRPC_PORT = 50055
ROLES: Mapping[str, str] = {"checkin": "server"}
# The door keeps everything in Postgres.
STORES = ("postgres",)
# The largest request the server takes: an upload of MAX_UPLOAD rotating
# codes (about 320 bytes a scan) is about 3.2 MB.
MAX_REQUEST_BYTES = 8 << 20


def migrations() -> list[Migration]:
    return [*audit.migrations(COMPONENT), *load_migrations(COMPONENT, "checkin_svc")]


@dataclass
class Overrides:
    """What a test replaces; ``None`` keeps what a process builds."""

    # Default: the events' settings (booking's events table).
    static_codes: StaticCodes | None = None
    reentry: ReEntry | None = None


@dataclass(frozen=True)
class CheckInServer:
    """The ``server`` role: what it runs, and what tests and benchmarks look into."""

    server: GrpcServer
    handler: CheckInHandler
    store: PgCheckInStore
    devices: PgGateDeviceStore
    device_keys: DeviceKeys
    settings: PgEventSettings
    metrics: CheckInMetrics

    @property
    def components(self) -> list[Component]:
        return [self.server]


def public_keys_of(ring: SecretSource[ticketcodes.CheckInKeys]) -> Callable[[], Mapping[str, Ed25519PublicKey]]:
    """The public keys of the ring now, derived again only when it changes."""
    derived: list[tuple[ticketcodes.CheckInKeys, Mapping[str, Ed25519PublicKey]]] = []

    def public() -> Mapping[str, Ed25519PublicKey]:
        keys = ring.get()
        if not derived or derived[0][0] is not keys:
            derived[:] = [(keys, keys.public())]
        return derived[0][1]

    return public


def compose_server(rt: Runtime, overrides: Overrides | None = None) -> CheckInServer:
    """The ``server`` role's object graph."""
    overrides = overrides or Overrides()
    pool = rt.pool()
    keys = ticketcodes.read_keys(rt.env)
    public_keys = public_keys_of(keys)
    verifier = ticketcodes.TicketCodeVerifier(public_keys, rt.clock)
    signer = ticketcodes.TicketCodeSigner(keys.get, rt.clock)
    metrics = CheckInMetrics.create(rt.registry)
    settings = PgEventSettings(pool, rt.clock)
    reentry = overrides.reentry or ReEntryOf(settings)
    store = PgCheckInStore(pool)
    handler = CheckInHandler(
        store, verifier, rt.clock, overrides.static_codes or StaticCodesOf(settings), metrics, reentry
    )
    devices = PgGateDeviceStore(pool)
    device_keys = DeviceKeys(devices, rt.clock)
    servicer = CheckInServicer(
        handler=handler,
        devices=device_keys,
        rotations=Rotations(pool, handler, signer),
        public_keys=public_keys,
        reentry=reentry,
        clock=rt.clock,
    )
    admin = CheckInAdminServicer(store=devices, auditor=audit.Auditor(pool), keys=device_keys)
    server = rt.grpc_server(
        COMPONENT, [servicer.registration(), admin.registration()], min_message_bytes=MAX_REQUEST_BYTES
    )
    return CheckInServer(
        server=server,
        handler=handler,
        store=store,
        devices=devices,
        device_keys=device_keys,
        settings=settings,
        metrics=metrics,
    )


def check_settings(env: Env) -> None:
    ticketcodes.read_keys(env)


async def build(rt: Runtime, role: str) -> list[Component]:
    if role == "server":
        return compose_server(rt).components
    raise ValueError(f"unknown checkin role {role!r}")


async def seed_demo(rt: Runtime) -> list[str]:
    return []
