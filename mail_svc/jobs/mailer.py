"""The mailer (role ``mailer``): a consumer of booking's outbox stream that
sends one e-mail per booking and message kind: the tickets once a
BookingConfirmed's tickets are issued, "tickets void" on BookingCancelled.
Two sweeps write what no stream announces: a ticket transfer's claim link
to the friend, and a waiting-list offer to its fan.

Exactly once, whatever fails: the delivery record (unique per booking and
kind, with its Message-ID) is written before the send and marked after it.
A crash between the two leaves it PENDING: the entry is handled again (or
the resend sweep finds it) and the same message goes out with the same
Message-ID, which receivers deduplicate. A relay's "try later" (4xx) is
tried again with backoff, then left pending; a refusal (5xx, a refused
address) is recorded FAILED, counted, and sent again only by an operator's
resend. The fan's address is never logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from email.utils import make_msgid

import psycopg

from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from boxoffice.streams import StreamEntry
from boxoffice.tracing import Tracing
from mail_svc.metrics import MailMetrics
from mail_svc.model import BookingMail, Delivery, DeliveryState, Kind, Recipient
from mail_svc.ports import DeliveryStore, OfferMails, PendingDeliveries, Relay, RelayBusy, RelayRefused, TransferMails
from mail_svc.render import Renderer

_log = logging.getLogger("mail_svc.mailer")

MAILER_GROUP = "mailer"
_KINDS = {"BookingConfirmed": Kind.TICKETS, "BookingCancelled": Kind.VOID}


def new_message_id(hold_id: str, kind: Kind, domain: str) -> str:
    """A new Message-ID for the booking's message of ``kind`` (every send
    of one delivery carries the one it was written with)."""
    return make_msgid(idstring=f"{kind.value}.{hold_id}", domain=domain)


class TicketsNotIssued(ConnectionError):
    """The booking's tickets are not issued yet: the entry stays pending."""


@dataclass
class MailHooks:
    """Test hook at the mailer's crash point: after the relay took the
    message, before the delivery is marked sent."""

    after_send: Callable[[Delivery], Awaitable[None]] | None = None


@dataclass(frozen=True, slots=True)
class MailPolicy:
    busy_attempts: int
    busy_backoff_seconds: float
    tickets_wait_seconds: float
    # The domain of the Message-IDs (the sender's).
    domain: str


class Mailer:
    """The mailer's entry handler, and the sender its resend sweep uses."""

    def __init__(
        self,
        *,
        store: DeliveryStore,
        relay: Relay,
        renderer: Renderer,
        metrics: MailMetrics,
        policy: MailPolicy,
        clock: Clock,
        hooks: MailHooks | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self._store = store
        self._relay = relay
        self._renderer = renderer
        self._metrics = metrics
        self._policy = policy
        self._clock = clock
        self._hooks = hooks or MailHooks()
        self._tracing = tracing or Tracing.off()

    async def handle(self, entry: StreamEntry) -> None:
        kind = _KINDS.get(entry.type)
        if kind is None:
            return  # other event types are not the mailer's
        hold_id = str(uuid.UUID(str(entry.payload.get("hold_id") or entry.aggregate_id)))
        attributes = {"messaging.system": "redis", "messaging.message.id": entry.event_id, "boxoffice.mail_kind": kind}
        with self._tracing.consuming(f"mail {kind.value}", entry.traceparent, attributes):
            booking = await self._wait_for_tickets(hold_id)
            delivery = await self._store.open_delivery(
                hold_id, kind, booking.event.event_id, self.new_message_id(hold_id, kind)
            )
            await self.deliver(delivery, booking, created_at=entry.created_at)

    def new_message_id(self, hold_id: str, kind: Kind) -> str:
        return new_message_id(hold_id, kind, self._policy.domain)

    async def _wait_for_tickets(self, hold_id: str) -> BookingMail:
        """The booking once its tickets exist (the issuer reads the same
        stream); TicketsNotIssued after the wait."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self._policy.tickets_wait_seconds
        pause = 0.05
        while True:
            booking = await self._store.booking(hold_id)
            if booking is not None:
                return booking
            if loop.time() >= until:
                raise TicketsNotIssued(f"booking {hold_id} has no tickets yet")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    async def deliver(self, delivery: Delivery, booking: BookingMail | None = None, *, created_at: float) -> None:
        """Send a PENDING delivery (with its own Message-ID) and mark it."""
        if delivery.state is not DeliveryState.PENDING:
            return  # sent, failed for good, or without an address: done
        if delivery.kind is Kind.TRANSFER:
            await self._deliver_transfer(delivery, created_at=created_at)
            return
        if delivery.kind is Kind.OFFER:
            await self._deliver_offer(delivery, created_at=created_at)
            return
        kind = delivery.kind
        recipient = await self._store.recipient(delivery.hold_id)
        if recipient is None:
            await self._no_address(delivery, "booking has no verified address; nothing sent")
            return
        if booking is None:
            booking = await self._wait_for_tickets(delivery.hold_id)
        # Rendering (the QR codes above all) is CPU work of tens of
        # milliseconds: in a worker thread, so that the event loop keeps
        # serving the other entries' reads and writes meanwhile.
        message = await asyncio.to_thread(
            self._renderer.render,
            booking,
            kind,
            language=recipient.language,
            to=recipient.email,
            message_id=delivery.message_id,
            now=datetime.fromtimestamp(self._clock.now(), UTC),
        )
        await self._send(delivery, message, recipient.email, created_at=created_at)

    async def _deliver_transfer(self, delivery: Delivery, *, created_at: float) -> None:
        """A transfer's claim link, to the friend, while the transfer is pending."""
        transfer = await self._store.transfer(delivery.hold_id)
        if transfer is None or not transfer.pending:
            # Claimed or withdrawn before its link went out: nothing to send.
            await self._ended(delivery, "the transfer is no longer pending")
            return
        message = self._renderer.render_transfer(
            transfer,
            to=transfer.email,
            message_id=delivery.message_id,
            now=datetime.fromtimestamp(self._clock.now(), UTC),
        )
        await self._send(delivery, message, transfer.email, created_at=created_at)

    async def _deliver_offer(self, delivery: Delivery, *, created_at: float) -> None:
        """A waiting-list offer, to its fan, while it can still be taken."""
        offer = await self._store.offer(delivery.hold_id)
        if offer is None or not offer.open:
            # Taken, declined or lapsed before its message went out.
            await self._ended(delivery, "the offer is no longer open")
            return
        # The address the fan joined the list with; else their latest
        # payment's.
        recipient = (
            Recipient(offer.email, offer.language or "en")
            if offer.email
            else await self._store.fan_recipient(offer.customer_id)
        )
        if recipient is None:
            await self._no_address(delivery, "the offer's fan has no verified address; nothing sent")
            return
        message = self._renderer.render_offer(
            offer,
            language=recipient.language,
            to=recipient.email,
            message_id=delivery.message_id,
            now=datetime.fromtimestamp(self._clock.now(), UTC),
        )
        await self._send(delivery, message, recipient.email, created_at=created_at)

    async def _ended(self, delivery: Delivery, why: str) -> None:
        """What the message was about ended before it went out: recorded
        FAILED, with ``why``, and nothing sent."""
        await self._store.mark(delivery.hold_id, delivery.kind, DeliveryState.FAILED, error=why)
        self._metrics.messages.labels(kind=delivery.kind.value, outcome="failed").inc()

    async def _no_address(self, delivery: Delivery, note: str) -> None:
        """Nobody to write to: recorded NO_ADDRESS (and logged), nothing sent."""
        await self._store.mark(delivery.hold_id, delivery.kind, DeliveryState.NO_ADDRESS)
        self._metrics.messages.labels(kind=delivery.kind.value, outcome="no_address").inc()
        _log.info(note, extra={"hold_id": delivery.hold_id})

    async def _send(self, delivery: Delivery, message: Message, to: str, *, created_at: float) -> None:
        kind = delivery.kind
        for attempt in range(self._policy.busy_attempts):
            try:
                await self._relay.send(message, to)
                break
            except RelayRefused as err:
                await self._store.mark(delivery.hold_id, kind, DeliveryState.FAILED, error=str(err))
                self._metrics.messages.labels(kind=kind.value, outcome="failed").inc()
                _log.error(
                    "the relay refused a message; recorded as failed",
                    extra={
                        "hold_id": delivery.hold_id,
                        "kind": kind.value,
                        "relay": self._relay.name,
                        "answer": str(err),
                    },
                )
                return
            except RelayBusy as err:
                await self._store.mark(delivery.hold_id, kind, DeliveryState.PENDING, error=str(err))
                self._metrics.messages.labels(kind=kind.value, outcome="retried").inc()
                if attempt + 1 == self._policy.busy_attempts:
                    raise  # the entry stays pending; tried again later
                await asyncio.sleep(self._policy.busy_backoff_seconds * 2**attempt)
        if self._hooks.after_send is not None:
            await self._hooks.after_send(delivery)
        await self._store.mark(delivery.hold_id, kind, DeliveryState.SENT)
        self._metrics.messages.labels(kind=kind.value, outcome="sent").inc()
        self._metrics.lag_seconds.observe(max(0.0, time.time() - created_at))


class ResendSweep:
    """Every ``interval_seconds``, sends the deliveries due a send: those an
    operator's resend queued, and those left PENDING for ``stale_seconds``
    (a mailer that died between the send and the mark; a relay that kept
    saying "later")."""

    def __init__(
        self, mailer: Mailer, store: PendingDeliveries, *, interval_seconds: float, stale_seconds: float
    ) -> None:
        self._mailer = mailer
        self._store = store
        self._interval = interval_seconds
        self._stale = stale_seconds

    async def run_once(self) -> int:
        done = 0
        for delivery in await self._store.pending(100, older_than_seconds=self._stale):
            try:
                await self._mailer.deliver(delivery, created_at=time.time())
            except (RelayBusy, TicketsNotIssued):
                continue
            done += 1
        return done

    async def run(self) -> None:
        await _every(self._interval, self.run_once, "resend sweep", wait_first=True)


class TransferSweep:
    """Writes to the friends of new transfers: every ``interval_seconds``,
    the pending transfers that have no delivery yet get one (PENDING, with
    its Message-ID) and are sent. The delivery record makes each transfer's
    e-mail go out once, whatever crashes; a relay's "later" leaves it to
    the resend sweep."""

    def __init__(self, mailer: Mailer, store: TransferMails, deliveries: DeliveryStore, *, interval_seconds: float):
        self._mailer = mailer
        self._store = store
        self._deliveries = deliveries
        self._interval = interval_seconds

    async def run_once(self) -> int:
        sent = 0
        for transfer_id, event_id in await self._store.unsent_transfers(100):
            delivery = await self._deliveries.open_delivery(
                transfer_id, Kind.TRANSFER, event_id, self._mailer.new_message_id(transfer_id, Kind.TRANSFER)
            )
            try:
                await self._mailer.deliver(delivery, created_at=time.time())
            except RelayBusy:
                continue
            sent += 1
        return sent

    async def run(self) -> None:
        await _every(self._interval, self.run_once, "transfer mail sweep")


class OfferSweep:
    """Writes to the fans offered seats from a waiting list: every
    ``interval_seconds``, the open offers (entry OFFERED, its hold HELD and
    not lapsed) that have no delivery yet get one (PENDING, with its
    Message-ID) and are sent by the sweep that wrote it, so that two
    mailers never send one offer twice; a crash or a relay's "later"
    leaves it PENDING, for the resend sweep."""

    def __init__(self, mailer: Mailer, store: OfferMails, *, interval_seconds: float):
        self._mailer = mailer
        self._store = store
        self._interval = interval_seconds

    async def run_once(self) -> int:
        sent = 0
        for hold_id, event_id in await self._store.unsent_offers(100):
            delivery = await self._store.new_delivery(
                hold_id, Kind.OFFER, event_id, self._mailer.new_message_id(hold_id, Kind.OFFER)
            )
            if delivery is None:
                continue  # another mailer's
            try:
                await self._mailer.deliver(delivery, created_at=time.time())
            except RelayBusy:
                continue
            sent += 1
        return sent

    async def run(self) -> None:
        await _every(self._interval, self.run_once, "offer mail sweep")


async def _every(
    interval_seconds: float, run_once: Callable[[], Awaitable[int]], name: str, *, wait_first: bool = False
) -> None:
    """Runs a sweep's ``run_once`` every ``interval_seconds``, for ever
    (``wait_first``: the first run after one interval, not at once); a run
    that fails on the database, the relay or the network is logged and the
    next one goes ahead."""
    while True:
        if wait_first:
            await asyncio.sleep(interval_seconds)
        try:
            await run_once()
        except (BoxofficeError, psycopg.Error, OSError) as err:
            _log.warning(f"{name} failed; will run again", extra={"error": repr(err)})
        if not wait_first:
            await asyncio.sleep(interval_seconds)
