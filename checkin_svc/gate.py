"""Which gate device is calling: its key, from the call's metadata, checked
against the gate-device store.

The edge passes a device's ``Authorization: Device <key>`` on untouched in
``x-boxoffice-device-key``; the device (and so its id and event) comes from
the key alone, never from a request body. A key that passed is kept for
:data:`KEPT_SECONDS`, so that a device scanning all evening costs the
database one lookup a second, not one a scan, and a misread code costs it
nothing; a revoked key is refused within that second by every replica (at
once by the one that revoked it). A key that failed is never kept.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

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

    def __init__(
        self,
        directory: DeviceDirectory,
        *,
        kept_seconds: float = KEPT_SECONDS,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._directory = directory
        self._kept_seconds = kept_seconds
        self._now = now
        self._kept: OrderedDict[bytes, tuple[float, GateDevice]] = OrderedDict()

    async def device(self, key: str | None, event_id: int) -> GateDevice:
        """The device ``key`` belongs to, which must be of ``event_id``.

        UNAUTHENTICATED ``DEVICE_KEY_INVALID`` for no key or a malformed,
        unknown or revoked one; PERMISSION_DENIED ``DEVICE_WRONG_EVENT``
        for a device of another event."""
        digest = None if not key else devices.key_hash(key)
        if key is None or digest is None:
            raise _invalid()
        now = self._now()
        kept = self._kept.get(digest)
        if kept is not None and now - kept[0] < self._kept_seconds:
            device = kept[1]
        else:
            self._kept.pop(digest, None)
            found = await self._directory.authenticate(key)
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
