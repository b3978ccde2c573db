"""The booking use cases, between the wire (servicer) and the ports (the
store and the seat gate): who may do what, the seat map cache, the metrics."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from prometheus_client import Counter

from booking_svc.cancellation import CancellationQuote, quote
from booking_svc.catalogue import CatalogueRequest, open_page_token, page_token
from booking_svc.config import BookingConfig
from booking_svc.metrics import BookingMetrics
from booking_svc.model import (
    CatalogueEntry,
    ClaimedTransfer,
    Event,
    EventSpec,
    Hold,
    Money,
    RowSpec,
    SeatMap,
    SeatSelection,
    Selection,
    utc,
)
from booking_svc.ports import BookingStore, SeatGate, attempt_token
from booking_svc.seatmap import SeatMapCache
from boxoffice import access, boundedjson, caller, validate
from boxoffice.clock import Clock
from boxoffice.errors import Aborted, BoxofficeError, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from boxoffice.sessions import EndedSessionsView
from boxoffice.tokens import AccessClaims, TokenSigner, asserted_customer, token_customer

# Best available answers ABORTED when every free seat it saw was being taken
# by a concurrent picker; it looks again this many times first.
_CONTENDED_RETRIES = 2


def _fingerprint(selection: Selection) -> str:
    if isinstance(selection, SeatSelection):
        text = "seats:" + ",".join(str(s) for s in selection.seat_ids)
    else:
        text = f"best:{selection.section_id}:{selection.quantity}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _page_token(event_id: int, customer_id: str | None, last: Hold) -> str:
    body = {"e": event_id, "c": customer_id or "", "t": last.created_at.isoformat(), "h": str(last.hold_id)}
    return base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).decode().rstrip("=")


def _parse_page_token(token: str, event_id: int, customer_id: str | None) -> tuple[datetime, uuid.UUID]:
    bad = InvalidArgument(
        "page_token is not a token from this listing", reason="INVALID_PAGE_TOKEN", metadata={"field": "page_token"}
    )
    try:
        # Bounded: a token is ours (a few fields), and anything else is refused
        # before the parser recurses into it.
        body = boundedjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)), max_bytes=1024, max_depth=2)
        after = (datetime.fromisoformat(body["t"]), uuid.UUID(body["h"]))
        same_listing = body["e"] == event_id and body["c"] == (customer_id or "")
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise bad from None
    if not same_listing or after[0].tzinfo is None:
        raise bad
    return after


class BookingHandler:
    def __init__(
        self,
        *,
        store: BookingStore,
        signer: TokenSigner,
        clock: Clock,
        gate: SeatGate,
        seat_maps: SeatMapCache,
        metrics: BookingMetrics,
        config: BookingConfig,
        sessions: EndedSessionsView | None = None,
    ) -> None:
        self._store = store
        self._signer = signer
        self._clock = clock
        self._gate = gate
        self._seat_maps = seat_maps
        self._metrics = metrics
        self._config = config
        # Ended sessions, whose tokens are refused (None: not checked).
        self._sessions = sessions
        # The holds counter's children by result, resolved once each.
        self._hold_results: dict[str, Counter] = {}

    def now(self) -> datetime:
        return utc(self._clock.now())

    # -- events --------------------------------------------------------------

    async def create_event(self, spec: EventSpec) -> Event:
        return await self._store.create_event(spec)

    async def get_event(self, event_id: int) -> Event:
        return await self._store.get_event(event_id)

    async def list_events(self, request: CatalogueRequest) -> tuple[list[CatalogueEntry], str | None]:
        """A page of the catalogue: published events, soonest first; events
        that have started are left out unless the caller asks from earlier."""
        query = request.query
        after = None if request.page_token is None else open_page_token(self._signer, query, request.page_token)
        now = self.now()
        searched = query if query.starts_after is not None else replace(query, starts_after=now)
        entries = await self._store.list_events(searched, limit=request.page_size + 1, after=after, now=now)
        if len(entries) > request.page_size:
            entries = entries[: request.page_size]
            return entries, page_token(self._signer, query, entries[-1])
        return entries, None

    async def load_inventory(self, event_id: int, rows: Sequence[RowSpec]) -> tuple[int, Event]:
        loaded = await self._store.load_inventory(event_id, rows)
        return loaded, await self._store.get_event(event_id)

    async def seat_map(self, event_id: int, section_id: str | None) -> SeatMap:
        seat_map = await self._seat_maps.get(event_id)
        if section_id is None:
            return seat_map
        sections = tuple(s for s in seat_map.sections if s.section.section_id == section_id)
        if not sections:
            raise InvalidArgument(
                f"section {section_id!r} does not exist in event {event_id}",
                reason="UNKNOWN_SECTION",
                metadata={"field": "section_id", "section_id": section_id},
            )
        return replace(seat_map, sections=sections)

    # -- holds ---------------------------------------------------------------

    async def hold_seats(
        self, *, access_token: str, event_id: int, selection: Selection, request_id: str | None
    ) -> Hold:
        began = time.perf_counter()
        result = "error"
        try:
            customer_id = token_customer(self._live(self._signer.verify(access_token, event_id=event_id)))
            hold, replayed = await self._hold(customer_id, event_id, selection, request_id)
            result = "replayed" if replayed else "held"
            return hold
        except BoxofficeError as err:
            result = err.reason.lower()
            raise
        finally:
            child = self._hold_results.get(result)
            if child is None:
                child = self._hold_results[result] = self._metrics.holds.labels(result)
            child.inc()
            self._metrics.hold_seconds.observe(time.perf_counter() - began)

    async def _hold(
        self, customer_id: str, event_id: int, selection: Selection, request_id: str | None
    ) -> tuple[Hold, bool]:
        gated: tuple[int, ...] = ()
        token = ""
        if isinstance(selection, SeatSelection) and self._config.seat_gate:
            token = attempt_token(customer_id, request_id)
            taken = await self._gate.claim(event_id, selection.seat_ids, token)
            if taken:
                ids = ",".join(str(s) for s in taken)
                raise FailedPrecondition(
                    f"seats {ids} are not available", reason="SEAT_UNAVAILABLE", metadata={"seat_ids": ids}
                )
            gated = selection.seat_ids
        attempts = 1 if isinstance(selection, SeatSelection) else 1 + _CONTENDED_RETRIES
        try:
            for attempt in range(attempts):
                try:
                    return await self._store.hold_seats(
                        event_id=event_id,
                        customer_id=customer_id,
                        selection=selection,
                        hold_id=uuid.uuid4(),
                        request_id=request_id,
                        # What a retry with the same request id must ask for
                        # (only such a retry compares it).
                        fingerprint=_fingerprint(selection) if request_id else "",
                        now=self.now(),
                    )
                except Aborted:
                    if attempt + 1 == attempts:
                        raise
            raise AssertionError("unreachable")
        except BaseException:
            if gated:
                await self._gate.release(event_id, gated, token)
            raise

    def _live(self, claims: AccessClaims) -> AccessClaims:
        """The claims of a token whose session has not ended (a dictionary
        lookup in memory, see :mod:`boxoffice.sessions`)."""
        if self._sessions is not None:
            self._sessions.check(claims)
        return claims

    async def _owned_hold(self, access_token: str, hold_id: uuid.UUID) -> Hold:
        if not access_token:
            self._signer.verify(access_token, event_id=0)  # raises TOKEN_MISSING
        hold = await self._store.get_hold(hold_id)
        if hold is None:
            raise NotFound(
                f"hold {hold_id} does not exist", reason="HOLD_NOT_FOUND", metadata={"hold_id": str(hold_id)}
            )
        customer_id = token_customer(self._live(self._signer.verify(access_token, event_id=hold.event_id)))
        if customer_id != hold.customer_id:
            raise PermissionDenied(
                "the hold belongs to another customer", reason="NOT_HOLD_OWNER", metadata={"hold_id": str(hold_id)}
            )
        return hold

    async def get_hold(self, *, access_token: str, hold_id: uuid.UUID) -> Hold:
        return await self._owned_hold(access_token, hold_id)

    async def list_holds(
        self, *, event_id: int, customer_id: str | None, page_size: int, page_token: str | None
    ) -> tuple[list[Hold], str | None]:
        """A page of holds of the event: the edge's are its asserted fan's
        only (a ``customer_id`` naming another is refused); an operator's
        are one customer's, or every customer's without one."""
        if caller.current().role != access.OPERATOR:
            customer_id = asserted_customer(customer_id or "")
        after = None if page_token is None else _parse_page_token(page_token, event_id, customer_id)
        holds = await self._store.list_holds(
            event_id=event_id, customer_id=customer_id, limit=page_size + 1, after=after
        )
        if len(holds) > page_size:
            holds = holds[:page_size]
            return holds, _page_token(event_id, customer_id, holds[-1])
        return holds, None

    async def release_hold(self, *, access_token: str, hold_id: uuid.UUID) -> Hold:
        owned = await self._owned_hold(access_token, hold_id)
        hold = await self._store.release_hold(hold_id=hold_id, customer_id=owned.customer_id, now=self.now())
        if self._config.seat_gate:
            await self._gate.clear(hold.event_id, [s.seat_id for s in hold.seats])
        return hold

    async def extend_hold(self, *, hold_id: uuid.UUID, customer_id: str, extend_by: timedelta) -> Hold:
        return await self._store.extend_hold(
            hold_id=hold_id,
            customer_id=customer_id,
            extend_by=extend_by,
            max_lifetime=timedelta(seconds=self._config.max_hold_lifetime_seconds),
            now=self.now(),
        )

    async def restore_hold_expiry(self, *, hold_id: uuid.UUID, customer_id: str, expires_at: datetime) -> Hold:
        return await self._store.restore_hold_expiry(
            hold_id=hold_id, customer_id=customer_id, expires_at=expires_at, now=self.now()
        )

    async def confirm_hold(
        self, *, hold_id: uuid.UUID, idempotency_key: str, payment_id: str, amount_paid: Money
    ) -> Hold:
        result = "error"
        try:
            hold = await self._store.confirm_hold(
                hold_id=hold_id,
                idempotency_key=idempotency_key,
                payment_id=payment_id,
                amount_paid=amount_paid,
                now=self.now(),
            )
            result = "confirmed"
            return hold
        except BoxofficeError as err:
            result = err.reason.lower()
            raise
        finally:
            self._metrics.confirms.labels(result).inc()

    async def cancellation_quote(self, *, booking_id: uuid.UUID) -> tuple[Hold, CancellationQuote]:
        """What cancelling the booking would do now under its event's
        policy. Through the edge, only the asserted fan's own booking:
        another's is NOT_FOUND, as one that does not exist."""
        hold = await self._store.get_hold(booking_id)
        if hold is not None and caller.current().is_edge and hold.customer_id != asserted_customer():
            hold = None
        if hold is None:
            raise NotFound(
                f"booking {booking_id} does not exist", reason="HOLD_NOT_FOUND", metadata={"hold_id": str(booking_id)}
            )
        event = await self._store.get_event(hold.event_id)
        away = await self._store.tickets_transferred_away(hold.hold_id, hold.customer_id)
        return hold, quote(hold, event.refund_policy, self.now(), transferred_away=away)

    async def cancel_booking(
        self,
        *,
        hold_id: uuid.UUID,
        customer_id: str | None,
        reason: str,
        refunded_at_provider: bool = False,
        quoted_refund: Money | None = None,
    ) -> tuple[Hold, int]:
        """Cancel a confirmed booking. The edge cancels its asserted fan's
        own (``customer_id``, when given, must name that fan); an operator
        and payment name the booking's customer. PaymentService cancels one
        only to refund it (RefundPayment): for that caller a policy that
        grants nothing refuses the cancel, so a refund never voids a booking
        for nothing and never leaves one confirmed; but money already given
        back at the provider (``refunded_at_provider``, PaymentService only)
        cancels it whatever the policy, granting nothing more. The fan's own
        cancel (through the edge, or payment's with the fan's quote) is
        refused while a friend holds one of the booking's tickets by a
        claimed transfer (TICKETS_TRANSFERRED); an operator's refund is not."""
        if refunded_at_provider and caller.current().role != access.PAYMENT:
            raise validate.invalid("refunded_at_provider", "is for PaymentService only")
        if caller.current().is_edge:
            customer_id = asserted_customer(customer_id or "")
        elif customer_id is None:
            raise validate.required("customer_id")
        hold, refund = await self._store.cancel_booking(
            hold_id=hold_id,
            customer_id=customer_id,
            reason=reason,
            now=self.now(),
            refund_required=caller.current().role == access.PAYMENT and not refunded_at_provider,
            refunded_at_provider=refunded_at_provider,
            quoted_refund=quoted_refund,
            by_fan=caller.current().is_edge or quoted_refund is not None,
        )
        if self._config.seat_gate:
            await self._gate.clear(hold.event_id, [s.seat_id for s in hold.seats])
        return hold, refund

    async def record_ticket_transfer(self, transfer: ClaimedTransfer) -> bool:
        """Record a transfer a claim committed in PaymentService (its only
        caller); True when it was recorded before."""
        return await self._store.record_transfer(transfer)
