"""The synthetic crowd of ``boxoffice simulate`` (``boxoffice_cli.simulate``):
the scenario's event and waiting room made over the admin API, and its fans
driving the real mesh through the edge's HTTP API, each as the scenario plans
(see ``boxoffice_cli.simulate``'s description of what a fan does)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

import httpx

from boxoffice_cli.simulate_scenario import FanPlan, Scenario, plan
from gen.boxoffice.booking.v1 import booking_admin_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_admin_service_pb2_grpc as bpb_grpc
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as qpb_grpc

ADMITTED = "QUEUE_STATE_ADMITTED"
WAITING = "QUEUE_STATE_WAITING"
# Requests in flight at once from the whole crowd.
IN_FLIGHT = 256
CALL_SECONDS = 30.0


class Dialer(Protocol):
    """Something that makes a gRPC stub (a ClientChannel, a test's client)."""

    def stub(self, factory: Callable[[Any], Any]) -> Any: ...


async def create_event(queue: Dialer, booking: Dialer, scenario: Scenario, event_id: int, opens_at: float) -> None:
    """The scenario's event (one seated section of ``seats`` seats) and its
    waiting room, over the admin API."""
    event = bpb.BookingAdminServiceCreateEventRequest(
        event_id=event_id,
        display_name=f"Simulated on-sale {event_id}",
        kind=bpb.MANAGED_EVENT_KIND_CONCERT,
        max_seats_per_customer=max(n for n, _ in scenario.tickets_per_order),
    )
    event.starts_at.FromSeconds(int(opens_at) + 30 * 86_400)
    event.hold_ttl.FromSeconds(300)
    section = event.sections.add(section_id="A", display_name="Stalls", kind=bpb.MANAGED_SECTION_KIND_SEATED)
    section.price.currency_code = scenario.currency
    section.price.amount_minor = scenario.price_minor
    admin = booking.stub(bpb_grpc.BookingAdminServiceStub)
    await admin.CreateEvent(event, timeout=CALL_SECONDS)
    rows = []
    left, number = scenario.seats, 0
    while left > 0:
        count = min(scenario.row_seats, left)
        rows.append(bpb.InventoryRow(section_id="A", row_label=f"R{number}", first_seat_number=1, seat_count=count))
        left -= count
        number += 1
    for start in range(0, len(rows), 500):
        await admin.LoadInventory(
            bpb.BookingAdminServiceLoadInventoryRequest(event_id=event_id, rows=rows[start : start + 500]),
            timeout=CALL_SECONDS * 2,
        )
    room = qpb.WaitingRoom(
        event_id=event_id,
        admission_rate_per_second=scenario.admission_rate,
        max_active_shoppers=scenario.max_active,
    )
    room.opens_at.FromMilliseconds(int(opens_at * 1000))
    room.pre_queue_window.FromSeconds(int(scenario.opens_in_seconds) + 60)
    room.session_length.FromSeconds(scenario.session_seconds)
    room.claim_grace.FromSeconds(scenario.claim_grace_seconds)
    room.token_ttl.FromSeconds(min(scenario.session_seconds, 300))
    await queue.stub(qpb_grpc.QueueAdminServiceStub).CreateWaitingRoom(
        qpb.CreateWaitingRoomRequest(config=room), timeout=CALL_SECONDS
    )


async def open_room(queue: Dialer, event_id: int) -> None:
    """Open the on-sale now."""
    await queue.stub(qpb_grpc.QueueAdminServiceStub).OpenWaitingRoom(
        qpb.OpenWaitingRoomRequest(event_id=event_id), timeout=CALL_SECONDS
    )


async def pause_room(queue: Dialer, event_id: int) -> None:
    """Stop admitting (the sale is over)."""
    await queue.stub(qpb_grpc.QueueAdminServiceStub).PauseWaitingRoom(
        qpb.PauseWaitingRoomRequest(event_id=event_id), timeout=CALL_SECONDS
    )


@dataclass
class Tally:
    """What the crowd saw (the report's figures come from Postgres)."""

    fans: int = 0
    arrived: int = 0
    joins_refused: int = 0
    admitted: int = 0
    held: int = 0
    declined: int = 0
    paid: int = 0
    tickets: int = 0
    sold_out_answers: int = 0
    left_waiting: int = 0
    errors: int = 0
    done: int = 0
    error_samples: list[str] = dataclasses.field(default_factory=list)

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 10:
            self.error_samples.append(what)


class ProgressBar:
    """The crowd's progress on one line (redrawn on a terminal)."""

    def __init__(self, out: TextIO, tally: Tally, seats: int) -> None:
        self._out = out
        self._tally = tally
        self._seats = seats
        self._tty = out.isatty()
        self._last = 0.0

    def draw(self, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < (0.2 if self._tty else 5.0):
            return
        self._last = now
        t = self._tally
        share = t.tickets / self._seats if self._seats else 1.0
        bar = "#" * round(30 * share)
        line = (
            f"[{bar:<30}] {t.tickets:,}/{self._seats:,} seats sold | fans {t.arrived:,}/{t.fans:,} arrived, "
            f"{t.admitted:,} admitted, {t.done:,} done | declined {t.declined:,}, refused joins {t.joins_refused:,}"
        )
        if self._tty:
            self._out.write("\r" + line + ("\n" if final else ""))
        else:
            self._out.write(line + "\n")
        self._out.flush()


def _duration(text: object, default: float) -> float:
    if isinstance(text, str) and text.endswith("s"):
        try:
            return float(text[:-1])
        except ValueError:
            return default
    return default


class Crowd:
    """The fans of one run against one edge."""

    def __init__(
        self,
        edge_url: str,
        event_id: int,
        scenario: Scenario,
        *,
        started_at: float,
        run_id: str,
        out: TextIO | None = None,
        on_sold_out: Callable[[], Coroutine[Any, Any, None]] | None = None,
        open_room: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        """``open_room``, when given, opens the room once every fan who
        arrives before the opening has joined (or been refused), and the fans
        who arrive after it wait for it: the pre-queue is whole at the
        opening however slowly the fans got there. Without it the room opens
        at its own ``opens_at``."""
        self._url = edge_url
        self._event = event_id
        self._scenario = scenario
        self._started = started_at
        self._run = run_id
        self._gate = asyncio.Semaphore(IN_FLIGHT)
        self.tally = Tally(fans=scenario.fans)
        self._sold_out = asyncio.Event()
        self._bar = ProgressBar(out, self.tally, scenario.seats) if out is not None else None
        self._on_sold_out = on_sold_out
        self._closing: asyncio.Task[None] | None = None
        self._transport = httpx.AsyncHTTPTransport()
        self._open_room = open_room
        self._opened = asyncio.Event()
        self._pre_queue_left = 0

    async def _call(self, client: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with self._gate:
            return await client.request(method, path, **kwargs)

    async def run(self) -> Tally:
        fans = plan(self._scenario)
        limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
        self._transport = httpx.AsyncHTTPTransport(limits=limits)
        self._pre_queue_left = sum(1 for f in fans if self._early(f))
        if self._open_room is not None and not self._pre_queue_left:
            await self._opening()
        tasks = [asyncio.create_task(self._fan(f)) for f in fans]
        drawing = asyncio.create_task(self._draw())
        try:
            await asyncio.gather(*tasks)
            if self._closing is not None:
                await self._closing
        finally:
            drawing.cancel()
            await self._transport.aclose()
            if self._bar is not None:
                self._bar.draw(final=True)
        return self.tally

    async def _draw(self) -> None:
        while self._bar is not None:
            self._bar.draw()
            await asyncio.sleep(0.2)

    def _address(self, fan: FanPlan) -> str:
        if fan.bot:
            return f"10.250.0.{1 + fan.index % 4}"  # bots share a few addresses
        return f"10.{(fan.index >> 16) & 255}.{(fan.index >> 8) & 255}.{fan.index & 255}"

    def _early(self, fan: FanPlan) -> bool:
        return fan.arrives_at < self._scenario.opens_in_seconds

    async def _opening(self) -> None:
        if self._open_room is not None:
            await self._open_room()
        self._opened.set()

    async def _joined_early(self) -> None:
        """One pre-queue fan is past joining; the last one opens the room."""
        self._pre_queue_left -= 1
        if self._open_room is not None and self._pre_queue_left == 0:
            await self._opening()

    async def _fan(self, fan: FanPlan) -> None:
        early = self._open_room is not None and self._early(fan)
        if self._open_room is not None and not early:
            await self._opened.wait()
        delay = self._started + fan.arrives_at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        # A client per fan (its cookies, its address) on the crowd's one
        # connection pool; closing it would close the pool, so it is left to go.
        client = httpx.AsyncClient(
            base_url=self._url,
            timeout=CALL_SECONDS,
            headers={"X-Forwarded-For": self._address(fan)},
            transport=self._transport,
        )
        try:
            await self._visit(client, fan, early)
        except httpx.HTTPError as err:
            self.tally.error(f"fan {fan.index}: {type(err).__name__}: {err}")
        finally:
            self.tally.done += 1

    async def _join(self, client: httpx.AsyncClient, fan: FanPlan) -> bool:
        """Sign in and join (a bot again and again): whether the fan is in."""
        t = self.tally
        signed = await self._call(client, "POST", "/v1/session", json={"name": f"sim-{self._run}-{fan.index}"})
        if signed.status_code != 200:
            t.error(f"sign-in {signed.status_code}: {signed.text[:200]}")
            return False
        t.arrived += 1
        base = f"/v1/events/{self._event}"
        joined = False
        for _ in range(self._scenario.bot_joins if fan.bot else 1):
            reply = await self._call(client, "POST", f"{base}/queue:join", json={})
            if reply.status_code == 200:
                joined = True
            elif reply.status_code == 429:
                t.joins_refused += 1
            else:
                t.error(f"join {reply.status_code}: {reply.text[:200]}")
        return joined

    async def _visit(self, client: httpx.AsyncClient, fan: FanPlan, early: bool) -> None:
        try:
            joined = await self._join(client, fan)
        finally:
            if early:
                await self._joined_early()
        t = self.tally
        base = f"/v1/events/{self._event}"
        if not joined or not fan.shows:
            return  # a bot or a fan who never comes back
        first = True
        while True:
            if self._sold_out.is_set():
                await self._call(client, "POST", f"{base}/queue:leave", json={})
                t.left_waiting += 1
                return
            reply = await self._call(client, "GET", f"{base}/queue/position")
            if reply.status_code != 200:
                t.error(f"position {reply.status_code}: {reply.text[:200]}")
                return
            position = reply.json()["position"]
            if position["state"] == ADMITTED:
                break
            if position["state"] != WAITING:
                return
            wait = _duration(position.get("pollAfter"), 5.0)
            if first:
                # Fans' polls are spread over the interval, not in step.
                wait *= 0.5 + fan.poll_phase
                first = False
            await self._sleep_or_sold_out(wait)
        t.admitted += 1
        token = position.get("accessToken")
        headers = {"Boxoffice-Access-Token": token} if token else {}
        await asyncio.sleep(fan.think)
        hold = await self._hold(client, fan.tickets, headers)
        if hold is None and fan.tickets > 1 and not self._sold_out.is_set():
            hold = await self._hold(client, 1, headers)
        if hold is None:
            await self._call(client, "POST", f"{base}/queue:leave", json={})
            return
        t.held += 1
        await asyncio.sleep(fan.pay)
        hold_id, seats = str(hold["holdId"]), int(hold.get("quantity") or len(hold.get("seats", [])) or 1)
        card = "pm_card_declined" if fan.declined else "pm_card_ok"
        started = await self._call(
            client, "POST", f"/v1/holds/{hold_id}/payment", json={"paymentMethod": card}, headers=headers
        )
        state = started.json().get("payment", {}).get("state", "") if started.status_code == 200 else ""
        if state not in ("PAYMENT_STATE_DECLINED", "PAYMENT_STATE_FAILED") and started.status_code == 200:
            payment_id = started.json()["payment"]["paymentId"]
            confirmed = await self._call(
                client,
                "POST",
                f"/v1/payments/{payment_id}:confirm",
                headers={**headers, "Idempotency-Key": f"sim-{uuid.uuid4().hex}"},
            )
            state = confirmed.json().get("payment", {}).get("state", "") if confirmed.status_code == 200 else ""
        if state == "PAYMENT_STATE_SUCCEEDED":
            t.paid += 1
            t.tickets += seats
            if t.tickets >= self._scenario.seats and not self._sold_out.is_set():
                self._sold_out.set()
                if self._on_sold_out is not None:
                    self._closing = asyncio.create_task(self._on_sold_out())
        else:
            t.declined += 1
            await self._call(client, "DELETE", f"/v1/holds/{hold_id}", headers=headers)
        await self._call(client, "POST", f"{base}/queue:leave", json={})

    async def _sleep_or_sold_out(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._sold_out.wait(), timeout=seconds)
        except TimeoutError:
            pass

    async def _hold(self, client: httpx.AsyncClient, quantity: int, headers: Mapping[str, str]) -> Any:
        reply = await self._call(
            client,
            "POST",
            f"/v1/events/{self._event}/holds",
            json={"bestAvailable": {"sectionId": "A", "quantity": quantity}},
            headers=dict(headers),
        )
        if reply.status_code == 200:
            return reply.json()["hold"]
        if reply.status_code == 429 and "SOLD_OUT" in reply.text:
            self.tally.sold_out_answers += 1
        elif reply.status_code != 429:
            self.tally.error(f"hold {reply.status_code}: {reply.text[:200]}")
        return None
