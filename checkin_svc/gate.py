"""Which gate device is calling: its key, from the call's metadata, checked
against the gate-device store.

The edge passes a device's ``Authorization: Device <key>`` on untouched in
``x-boxoffice-device-key``; the device (and so its id and event) comes from
the key alone, never from a request body. A key that passed is kept for
:data:`KEPT_SECONDS`, so that a device scanning all evening costs the
database one lookup a second, not one a scan, and a misread code costs it
nothing; a revoked key is refused within that second by every replica (at
once by the one that revoked it). A key that failed is never kept. Calls
that arrive together with a key not kept share one lookup, so a device's
burst does not become a burst of queries.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Protocol

from boxoffice.clock import Clock
from boxoffice.errors import PermissionDenied, Unauthenticated
from checkin_svc import devices
from checkin_svc.devices import GateDevice

DEVICE_KEY_METADATA_KEY = "x-boxoffice-device-key"
KEPT_SECONDS = 1.0
# Devices kept at once (a process serves a few doors' devices).
_KEPT = 4096


class DeviceDirectory(Protocol):
    """The gate devices' store, as authentication needs it."""

    async def authenticate(self, key: str) -> GateDevice | None: ...


class DeviceKeys:
    """Authenticates gate devices by key, briefly remembering good keys."""

    def __init__(self, directory: DeviceDirectory, clock: Clock, *, kept_seconds: float = KEPT_SECONDS) -> None:
        self._directory = directory
        self._kept_seconds = kept_seconds
        self._clock = clock
        self._kept: OrderedDict[bytes, tuple[float, GateDevice]] = OrderedDict()
        self._looking_up: dict[bytes, asyncio.Future[GateDevice | None]] = {}

    async def device(self, key: str | None, event_id: int) -> GateDevice:
        """The device ``key`` belongs to, which must be of ``event_id``.

        UNAUTHENTICATED ``DEVICE_KEY_INVALID`` for no key or a malformed,
        unknown or revoked one; PERMISSION_DENIED ``DEVICE_WRONG_EVENT``
        for a device of another event."""
        digest = None if not key else devices.key_hash(key)
        if key is None or digest is None:
            raise _invalid()
        now = self._clock.now()
        kept = self._kept.get(digest)
        # (A clock that went back does not make a kept key last longer.)
        if kept is not None and 0 <= now - kept[0] < self._kept_seconds:
            device = kept[1]
        else:
            self._kept.pop(digest, None)
            found = await self._look_up(digest, key)
            if found is None:
                raise _invalid()
            device = found
            self._kept[digest] = (now, device)
            while len(self._kept) > _KEPT:
                self._kept.popitem(last=False)
        if device.event_id != event_id:
            raise PermissionDenied(
                f"this gate device admits to event {device.event_id}, not {event_id}",
                reason="DEVICE_WRONG_EVENT",
                metadata={"device_event_id": str(device.event_id), "event_id": str(event_id)},
            )
        return device

    async def _look_up(self, digest: bytes, key: str) -> GateDevice | None:
        """The store's answer for ``key``, one lookup for the calls that ask at once."""
        pending = self._looking_up.get(digest)
        if pending is None:
            pending = asyncio.ensure_future(self._directory.authenticate(key))
            self._looking_up[digest] = pending
            pending.add_done_callback(lambda _: self._looking_up.pop(digest, None))
        # A caller that gives up does not cancel the others' lookup.
        return await asyncio.shield(pending)

    def forget(self, device_id: str) -> None:
        """Forget a device's key at once (it was revoked here)."""
        for digest, (_, device) in list(self._kept.items()):
            if device.device_id == device_id:
                del self._kept[digest]


def _invalid() -> Unauthenticated:
    return Unauthenticated(
        "a gate device's key is required (Authorization: Device <key>); this one is missing, unknown or revoked",
        reason="DEVICE_KEY_INVALID",
    )
