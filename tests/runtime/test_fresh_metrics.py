"""``/metrics`` of freshly started processes, one per role, before any
call: no ``_created`` series, no duplicate of the leader gauge, the
``state`` label in one case, and the labelled counters dashboards read
present at zero."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from payment_svc.model import PaymentState
from tests.runtime.processes import COMMANDS, Role, role_processes
from tests.support import Stores

_STATE = re.compile(r'\bstate="([^"]*)"')


async def _scrape(client: httpx.AsyncClient, role: Role) -> str:
    for _ in range(1200):
        assert role.process.returncode is None, f"{role.command} ended: {role.stderr()}"
        try:
            reply = await client.get(f"http://127.0.0.1:{role.metrics_port}/metrics")
        except httpx.TransportError:
            await asyncio.sleep(0.05)
            continue
        assert reply.status_code == 200
        return reply.text
    raise AssertionError(f"{role.command} never served /metrics: {role.stderr()}")


def _samples(text: str) -> set[str]:
    return {line for line in text.splitlines() if line and not line.startswith("#")}


@pytest.mark.slow
async def test_fresh_processes_expose_clean_series(stores: Stores, tmp_path: Path) -> None:
    settings = {"BOXOFFICE_BOOKING_ADDR": "127.0.0.1:1"}
    async with (
        role_processes(stores, [(command, settings) for command in COMMANDS], tmp_path) as roles,
        httpx.AsyncClient(timeout=10) as client,
    ):
        scraped = {role.command: await _scrape(client, role) for role in roles}
    for command, text in scraped.items():
        names = {line.split("{")[0].split(" ")[0] for line in _samples(text)}
        assert not [name for name in names if name.endswith("_created")], command
        assert "boxoffice_queue_admitter_leading" not in names, command
        states = set(_STATE.findall(text))
        assert states == {state.lower() for state in states}, (command, states)
    payment = _samples(scraped["payment-svc"])
    for state in PaymentState:
        assert f'boxoffice_payment_state_entered_total{{state="{state.value.lower()}"}} 0.0' in payment
    assert 'boxoffice_refunds_total{outcome="succeeded",source="REQUEST"} 0.0' in payment
    assert 'boxoffice_webhooks_total{outcome="applied",type="charge.succeeded"} 0.0' in payment
    assert 'boxoffice_webhook_verification_failures_total{reason="WEBHOOK_SIGNATURE_INVALID"} 0.0' in payment
    booking = _samples(scraped["booking-svc"])
    for result in ("held", "replayed"):
        assert f'boxoffice_booking_holds_total{{result="{result}"}} 0.0' in booking
    assert 'boxoffice_booking_confirms_total{result="confirmed"} 0.0' in booking
    sweeper = _samples(scraped["sweeper"])
    assert 'boxoffice_booking_sweeper_passes_total{result="error"} 0.0' in sweeper
    queue = _samples(scraped["queue-svc"])
    assert 'boxoffice_queue_joins_total{result="joined"} 0.0' in queue
    # The admitter's leadership is the election's gauge.
    assert any(line.startswith('boxoffice_leader_is_leader{name="admitter"}') for line in _samples(scraped["admitter"]))
