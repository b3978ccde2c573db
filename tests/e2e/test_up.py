"""`boxoffice up` as a new user runs it, on a machine with nothing running:
the embedded stores, every service on the ports it is told, the edge on
HTTP with development sign-in, and a fan's purchase through the edge that
crosses every service (payment dials booking on booking's port, whatever
it is)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import eventually, free_port


@pytest.mark.slow
async def test_up_serves_the_edge_and_wires_its_own_ports(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("QUEUE", "BOOKING", "PAYMENT", "CHECKIN", "EDGE", "METRICS")}
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("BOXOFFICE_") and key not in ("DATABASE_URL", "REDIS_URL")
    }
    env.update({f"BOXOFFICE_{name}_PORT": str(port) for name, port in ports.items()})
    env["BOXOFFICE_DATA_DIR"] = str(tmp_path / "data")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "boxoffice_cli",
        "up",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    banner: list[str] = []
    try:
        async with asyncio.timeout(120):
            while not any(line.startswith("  demo: pay in the sandbox") for line in banner):
                line = (await process.stdout.readline()).decode()
                assert line, f"boxoffice up ended early: {banner}"
                banner.append(line.rstrip("\n"))
        edge = f"http://127.0.0.1:{ports['EDGE']}"
        assert f"  edge       {edge}" in banner
        # A short banner: what was migrated is in the log, not here.
        assert not any("migration" in line for line in banner), banner
        assert f"  booking    grpcs://127.0.0.1:{ports['BOOKING']}" in banner
        assert f"  checkin    grpcs://127.0.0.1:{ports['CHECKIN']}" in banner

        async with httpx.AsyncClient(base_url=edge, timeout=30) as fan:

            async def polite(method: str, url: str, body: object | None = None) -> httpx.Response:
                """A fan's call as the pages make it: a 429 is waited out for as
                long as its Retry-After says (the account's limit is shared by
                every call, the polls included), then sent again."""
                for _ in range(30):
                    reply = await fan.request(method, url, json=body)
                    if reply.status_code != 429:
                        return reply
                    await asyncio.sleep(float(reply.headers.get("Retry-After", "1")))
                raise AssertionError(f"{method} {url} still refused after 30 waits: {reply.text}")

            assert (await polite("POST", "/v1/session", {"name": "first-fan"})).status_code == 200
            joined = await polite("POST", "/v1/events/1/queue:join", {})
            assert joined.status_code == 200, joined.text

            async def admitted() -> bool | None:
                reply = await polite("GET", "/v1/events/1/queue/position")
                assert reply.status_code == 200, reply.text
                return True if reply.json()["position"]["state"] == "QUEUE_STATE_ADMITTED" else None

            await eventually(admitted, "admitted on the demo event", seconds=60)
            held = await polite("POST", "/v1/events/1/holds", {"bestAvailable": {"sectionId": "FLOOR", "quantity": 1}})
            assert held.status_code == 200, held.text
            hold_id = held.json()["hold"]["holdId"]
            # Payment reads the hold from booking on the port `up` gave it.
            started = await polite("POST", f"/v1/holds/{hold_id}/payment", {"paymentMethod": "pm_card_ok"})
            assert started.status_code == 200, started.text
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            code = await process.wait()
    assert code == 0


@pytest.mark.parametrize("shared", [False, True], ids=["a plain listener", "another mesh's SO_REUSEPORT listener"])
async def test_a_port_in_use_is_one_line_before_anything_starts(tmp_path: Path, shared: bool) -> None:
    """Another process on one of `up`'s ports (the edge's, the last server
    `up` starts) stops it at once: no store started, no server, one line. A
    listener that allows sharing (as every server of the mesh once did) is
    no exception."""
    ports = {name: free_port() for name in ("QUEUE", "BOOKING", "PAYMENT", "CHECKIN", "EDGE", "METRICS")}
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("BOXOFFICE_") and key not in ("DATABASE_URL", "REDIS_URL")
    }
    env.update({f"BOXOFFICE_{name}_PORT": str(port) for name, port in ports.items()})
    env["BOXOFFICE_DATA_DIR"] = str(tmp_path / "data")
    with socket.socket() as other:
        if shared:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", ports["EDGE"]))
        other.listen()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "boxoffice_cli",
            "up",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(60):
            out, err = await process.communicate()
    assert process.returncode == 2
    assert out == b""
    assert err.decode().splitlines() == [
        f"boxoffice: configuration error: edge cannot listen on 127.0.0.1:{ports['EDGE']} (BOXOFFICE_EDGE_PORT):"
        " the port is in use"
    ]
    # Not even the embedded stores were started.
    assert not (tmp_path / "data").exists()
