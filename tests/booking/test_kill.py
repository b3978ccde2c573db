"""I10 for holds: SIGKILL the BookingService process in the middle of a
flood of holds. Every hold a client was told about is in Postgres with all
of its seats, and no seat is left taken without a live hold."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys

import grpc

from boxoffice.errors import BoxofficeError
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as pb_grpc
from tests.booking.harness import audit, booking_server, call, create_event, hold_request, query, seat_ids, seated
from tests.support import Stores, client_channel, tls_environ


async def _start_server(stores: Stores) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.serve",
        "booking-svc",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={
            **os.environ,
            "DATABASE_URL": stores.database_url,
            "REDIS_URL": stores.redis_url,
            **tls_environ(stores.pki.files("booking")),
        },
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), timeout=60)).decode()
    assert line.startswith("PORT "), line
    return proc, f"127.0.0.1:{int(line.split()[1])}"


async def test_killing_the_server_mid_flood_loses_no_hold_and_leaves_no_seat_stuck(stores: Stores) -> None:
    rng = random.Random(5)
    async with booking_server(stores) as booking:
        event = await create_event(
            booking, [seated("A")], [("A", f"R{r}", 50) for r in range(8)], max_seats_per_customer=100
        )
        seats = await seat_ids(booking, event.event_id, "A")
        proc, address = await _start_server(stores)
        told: list[pb.Hold] = []
        failed: list[BoxofficeError] = []
        killed = False
        try:
            async with client_channel(stores, address) as channel:
                stub = pb_grpc.BookingServiceStub(channel)
                semaphore = asyncio.Semaphore(32)

                async def one(i: int) -> None:
                    nonlocal killed
                    group = rng.sample(seats, rng.randint(1, 4))
                    request = hold_request(booking.token(f"k{i % 50}", event.event_id), event.event_id, group)
                    async with semaphore:
                        reply, err = await call(stub.HoldSeats(request, timeout=10))
                    if reply is not None:
                        told.append(reply.hold)
                    elif err is not None:
                        failed.append(err)
                    if len(told) == 40 and proc.returncode is None:
                        proc.send_signal(signal.SIGKILL)
                        killed = True

                await asyncio.gather(*(one(i) for i in range(600)))
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        # Killed mid-flood. (Its exit status can read 255 rather than -9: the
        # event loop's child watcher reports 255 when another waiter in this
        # test process reaped the child first.)
        assert killed and proc.returncode in (-signal.SIGKILL, 255)
        assert len(told) >= 40 and any(err.code == grpc.StatusCode.UNAVAILABLE for err in failed)
        for hold in told:
            rows = await query(
                booking,
                "SELECT count(*) FROM seats WHERE event_id = %s AND hold_id = %s AND status = 'HELD'",
                (event.event_id, hold.hold_id),
            )
            assert rows[0][0] == len(hold.seats), hold.hold_id
        await audit(booking, event.event_id)
