"""The check-in metrics: scans per event, gate and result, and conflicts
recorded from offline devices' uploads."""

from __future__ import annotations

import re
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from checkin_svc.model import ScanResult

# A gate id is the device's to name: one that is not a short plain name is
# counted as "other", so a device cannot grow the series without bound.
_GATE = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")


def gate_label(gate_id: str) -> str:
    return gate_id if _GATE.match(gate_id) else "other"


def result_label(result: ScanResult) -> str:
    """A result as the ``result`` label says it (lower case, as every label of the mesh)."""
    return result.value.lower()


@dataclass(frozen=True)
class CheckInMetrics:
    scans: Counter
    conflicts: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> CheckInMetrics:
        return cls(
            scans=Counter(
                "boxoffice_checkin_scans",
                "Scans at the door, by event, gate and result (admitted is checked in).",
                ("event_id", "gate", "result"),
                registry=registry,
            ),
            conflicts=Counter(
                "boxoffice_checkin_conflicts",
                "Offline admissions of tickets another check-in came first for, by event.",
                ("event_id",),
                registry=registry,
            ),
        )

    def scanned(self, event_id: int, gate_id: str, result: ScanResult) -> None:
        self.scans.labels(str(event_id), gate_label(gate_id), result_label(result)).inc()

    def conflict(self, event_id: int) -> None:
        self.conflicts.labels(str(event_id)).inc()
