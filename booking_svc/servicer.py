"""BookingService on the wire: each RPC parses its request
(:mod:`booking_svc.converters`), calls the handler and builds the response.

The service's deprecated admin RPCs are not here: they are answered by
:class:`booking_svc.admin_servicer.AuditedBookingServicer`, beside the admin
service whose use cases they share."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import grpc

from booking_svc.catalogue import entry_pb, parse_list_events
from booking_svc.converters import (
    SECTION_ID,
    SERVICE_NAME,
    event_pb,
    hold_pb,
    parse_hold_id,
    parse_money,
    parse_seconds,
    parse_selection,
    quote_pb,
    seat_map_pb,
)
from booking_svc.handler import BookingHandler
from booking_svc.model import ClaimedTransfer
from booking_svc.times import timestamp
from booking_svc.waitlist import Waitlist
from booking_svc.waitlist_wire import parse_join, waitlist_entry_pb
from boxoffice import validate
from boxoffice.server import Registration
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as pb_grpc

Context = grpc.aio.ServicerContext[Any, Any]


class BookingServicer(pb_grpc.BookingServiceServicer):
    def __init__(self, handler: BookingHandler, waitlist: Waitlist) -> None:
        self._handler = handler
        self._waitlist = waitlist

    def registration(self) -> Registration:
        add: Callable[[Any, grpc.aio.Server], None] = pb_grpc.add_BookingServiceServicer_to_server
        return Registration(SERVICE_NAME, lambda server: add(self, server))

    async def GetEvent(self, request: pb.GetEventRequest, context: Context) -> pb.GetEventResponse:
        event = await self._handler.get_event(validate.positive_id("event_id", request.event_id))
        return pb.GetEventResponse(event=event_pb(event))

    async def ListEvents(self, request: pb.ListEventsRequest, context: Context) -> pb.ListEventsResponse:
        entries, next_token = await self._handler.list_events(parse_list_events(request))
        return pb.ListEventsResponse(events=[entry_pb(e) for e in entries], next_page_token=next_token or "")

    async def GetSeatMap(self, request: pb.GetSeatMapRequest, context: Context) -> pb.GetSeatMapResponse:
        event_id = validate.positive_id("event_id", request.event_id)
        section_id = (
            validate.text("section_id", request.section_id, max_length=32, pattern=SECTION_ID)
            if request.section_id
            else None
        )
        return seat_map_pb(await self._handler.seat_map(event_id, section_id))

    async def HoldSeats(self, request: pb.HoldSeatsRequest, context: Context) -> pb.HoldSeatsResponse:
        event_id = validate.positive_id("event_id", request.event_id)
        selection = parse_selection(request)
        request_id = validate.text("request_id", request.request_id, max_length=64) if request.request_id else None
        hold = await self._handler.hold_seats(
            access_token=request.access_token, event_id=event_id, selection=selection, request_id=request_id
        )
        return pb.HoldSeatsResponse(hold=hold_pb(hold, self._handler.now()))

    async def GetHold(self, request: pb.GetHoldRequest, context: Context) -> pb.GetHoldResponse:
        hold = await self._handler.get_hold(
            access_token=request.access_token, hold_id=parse_hold_id("hold_id", request.hold_id)
        )
        return pb.GetHoldResponse(hold=hold_pb(hold, self._handler.now()))

    async def ListHolds(self, request: pb.ListHoldsRequest, context: Context) -> pb.ListHoldsResponse:
        event_id = validate.positive_id("event_id", request.event_id)
        customer_id = validate.text("customer_id", request.customer_id, max_length=128) if request.customer_id else None
        page_size = request.page_size or 100
        validate.int_range("page_size", page_size, minimum=1, maximum=1000)
        holds, next_token = await self._handler.list_holds(
            event_id=event_id,
            customer_id=customer_id,
            page_size=page_size,
            page_token=request.page_token or None,
        )
        now = self._handler.now()
        return pb.ListHoldsResponse(holds=[hold_pb(h, now) for h in holds], next_page_token=next_token or "")

    async def ReleaseHold(self, request: pb.ReleaseHoldRequest, context: Context) -> pb.ReleaseHoldResponse:
        hold = await self._handler.release_hold(
            access_token=request.access_token, hold_id=parse_hold_id("hold_id", request.hold_id)
        )
        return pb.ReleaseHoldResponse(hold=hold_pb(hold, self._handler.now()))

    async def ExtendHold(self, request: pb.ExtendHoldRequest, context: Context) -> pb.ExtendHoldResponse:
        hold_id = parse_hold_id("hold_id", request.hold_id)
        customer_id = validate.text("customer_id", request.customer_id, max_length=128)
        if request.HasField("restore_expires_at"):
            if request.HasField("extend_by"):
                raise validate.invalid("extend_by", "must not be set with restore_expires_at")
            restored = await self._handler.restore_hold_expiry(
                hold_id=hold_id,
                customer_id=customer_id,
                expires_at=timestamp("restore_expires_at", request.restore_expires_at),
            )
            return pb.ExtendHoldResponse(hold=hold_pb(restored, self._handler.now()))
        if not request.HasField("extend_by"):
            raise validate.required("extend_by")
        extend_by = parse_seconds("extend_by", request.extend_by, minimum=1, maximum=1800)
        hold = await self._handler.extend_hold(
            hold_id=hold_id, customer_id=customer_id, extend_by=timedelta(seconds=extend_by)
        )
        return pb.ExtendHoldResponse(hold=hold_pb(hold, self._handler.now()))

    async def ConfirmHold(self, request: pb.ConfirmHoldRequest, context: Context) -> pb.ConfirmHoldResponse:
        hold_id = parse_hold_id("hold_id", request.hold_id)
        key = validate.text("idempotency_key", request.idempotency_key, max_length=255)
        payment_id = validate.text("payment_id", request.payment_id, max_length=128)
        if not request.HasField("amount_paid"):
            raise validate.required("amount_paid")
        amount = parse_money("amount_paid", request.amount_paid)
        hold = await self._handler.confirm_hold(
            hold_id=hold_id, idempotency_key=key, payment_id=payment_id, amount_paid=amount
        )
        return pb.ConfirmHoldResponse(hold=hold_pb(hold, self._handler.now()))

    async def CancelBooking(self, request: pb.CancelBookingRequest, context: Context) -> pb.CancelBookingResponse:
        hold_id = parse_hold_id("hold_id", request.hold_id)
        customer_id = validate.text("customer_id", request.customer_id, max_length=128) if request.customer_id else None
        reason = validate.text("reason", request.reason, max_length=500, min_length=0)
        quoted = parse_money("quoted_refund", request.quoted_refund) if request.HasField("quoted_refund") else None
        hold, refund = await self._handler.cancel_booking(
            hold_id=hold_id,
            customer_id=customer_id,
            reason=reason,
            refunded_at_provider=request.refunded_at_provider,
            quoted_refund=quoted,
        )
        return pb.CancelBookingResponse(
            hold=hold_pb(hold, self._handler.now()),
            refund_amount=pb.Money(currency_code=hold.amount.currency, amount_minor=refund),
        )

    async def GetCancellationQuote(
        self, request: pb.GetCancellationQuoteRequest, context: Context
    ) -> pb.GetCancellationQuoteResponse:
        booking_id = parse_hold_id("booking_id", request.booking_id)
        hold, quote = await self._handler.cancellation_quote(booking_id=booking_id)
        return quote_pb(hold, quote)

    async def JoinWaitlist(self, request: pb.JoinWaitlistRequest, context: Context) -> pb.JoinWaitlistResponse:
        event_id, section_id, quantity = parse_join(request)
        entry, token, newly = await self._waitlist.join(event_id=event_id, section_id=section_id, quantity=quantity)
        return pb.JoinWaitlistResponse(entry=waitlist_entry_pb(entry, token, self._handler.now()), newly_joined=newly)

    async def GetWaitlistEntry(
        self, request: pb.GetWaitlistEntryRequest, context: Context
    ) -> pb.GetWaitlistEntryResponse:
        entry, token = await self._waitlist.get(event_id=validate.positive_id("event_id", request.event_id))
        return pb.GetWaitlistEntryResponse(entry=waitlist_entry_pb(entry, token, self._handler.now()))

    async def LeaveWaitlist(self, request: pb.LeaveWaitlistRequest, context: Context) -> pb.LeaveWaitlistResponse:
        entry = await self._waitlist.leave(event_id=validate.positive_id("event_id", request.event_id))
        return pb.LeaveWaitlistResponse(entry=waitlist_entry_pb(entry, "", self._handler.now()))

    async def RecordTicketTransfer(
        self, request: pb.RecordTicketTransferRequest, context: Context
    ) -> pb.RecordTicketTransferResponse:
        if not request.HasField("claimed_at"):
            raise validate.required("claimed_at")
        transfer = ClaimedTransfer(
            transfer_id=parse_hold_id("transfer_id", request.transfer_id),
            event_id=validate.positive_id("event_id", request.event_id),
            hold_id=parse_hold_id("booking_id", request.booking_id),
            unit=validate.int_range("unit", request.unit, minimum=1, maximum=100_000),
            generation=validate.int_range("generation", request.generation, minimum=1, maximum=1_000_000),
            sender_id=validate.text("sender_customer_id", request.sender_customer_id, max_length=128),
            receiver_id=validate.text("receiver_customer_id", request.receiver_customer_id, max_length=128),
            claimed_at=timestamp("claimed_at", request.claimed_at),
        )
        before = await self._handler.record_ticket_transfer(transfer)
        return pb.RecordTicketTransferResponse(recorded_before=before)
