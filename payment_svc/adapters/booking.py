"""BookingService over gRPC, as the payment service calls it (the
:class:`~payment_svc.ports.BookingClient`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from boxoffice import deadline
from boxoffice.errors import from_rpc_error
from boxoffice.tls import ClientChannel
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as pb_grpc
from payment_svc.model import ClaimedTransfer
from payment_svc.ports import BookingClient, CancelledBooking, HoldState, HoldView

_HOLD_STATES = {
    pb.HOLD_STATE_HELD: HoldState.HELD,
    pb.HOLD_STATE_CONFIRMED: HoldState.CONFIRMED,
    pb.HOLD_STATE_EXPIRED: HoldState.EXPIRED,
    pb.HOLD_STATE_RELEASED: HoldState.RELEASED,
    pb.HOLD_STATE_CANCELLED: HoldState.CANCELLED,
}


def _hold_view(hold: pb.Hold) -> HoldView:
    return HoldView(
        hold_id=hold.hold_id,
        event_id=hold.event_id,
        customer_id=hold.customer_id,
        state=_HOLD_STATES.get(hold.state, HoldState.UNKNOWN),
        amount_minor=hold.amount.amount_minor,
        currency=hold.amount.currency_code,
        payment_id=hold.payment_id,
        expires_at=hold.expires_at.ToDatetime(tzinfo=UTC) if hold.HasField("expires_at") else None,
    )


class GrpcBookingClient:
    """Calls BookingService, as the payment identity of ``channel`` (see
    :meth:`boxoffice.runtime.Runtime.channel`), with the remaining deadline
    of the current call; a failed call raises the domain error it carries."""

    def __init__(self, channel: ClientChannel) -> None:
        self._channel = channel

    def _client(self) -> Any:
        return self._channel.stub(pb_grpc.BookingServiceStub)

    async def _call(self, method: str, request: Any) -> Any:
        try:
            return await getattr(self._client(), method)(request, timeout=deadline.remaining())
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None

    async def get_hold(self, access_token: str, hold_id: str) -> HoldView:
        reply = await self._call("GetHold", pb.GetHoldRequest(access_token=access_token, hold_id=hold_id))
        return _hold_view(reply.hold)

    async def extend_hold(self, hold_id: str, customer_id: str, extend_by_seconds: int) -> HoldView:
        request = pb.ExtendHoldRequest(
            hold_id=hold_id, customer_id=customer_id, extend_by=duration_pb2.Duration(seconds=extend_by_seconds)
        )
        reply = await self._call("ExtendHold", request)
        return _hold_view(reply.hold)

    async def restore_hold_expiry(self, hold_id: str, customer_id: str, expires_at: datetime) -> HoldView:
        when = timestamp_pb2.Timestamp()
        when.FromDatetime(expires_at)
        request = pb.ExtendHoldRequest(hold_id=hold_id, customer_id=customer_id, restore_expires_at=when)
        reply = await self._call("ExtendHold", request)
        return _hold_view(reply.hold)

    async def confirm_hold(
        self, hold_id: str, idempotency_key: str, payment_id: str, amount_minor: int, currency: str
    ) -> HoldView:
        request = pb.ConfirmHoldRequest(
            hold_id=hold_id,
            idempotency_key=idempotency_key,
            payment_id=payment_id,
            amount_paid=pb.Money(currency_code=currency, amount_minor=amount_minor),
        )
        reply = await self._call("ConfirmHold", request)
        return _hold_view(reply.hold)

    async def cancel_booking(
        self,
        hold_id: str,
        customer_id: str,
        reason: str,
        *,
        refunded_at_provider: bool = False,
        quoted_refund: tuple[int, str] | None = None,
    ) -> CancelledBooking:
        request = pb.CancelBookingRequest(
            hold_id=hold_id, customer_id=customer_id, reason=reason, refunded_at_provider=refunded_at_provider
        )
        if quoted_refund is not None:
            request.quoted_refund.CopyFrom(pb.Money(amount_minor=quoted_refund[0], currency_code=quoted_refund[1]))
        reply = await self._call("CancelBooking", request)
        return CancelledBooking(_hold_view(reply.hold), reply.refund_amount.amount_minor)

    async def record_ticket_transfer(self, transfer: ClaimedTransfer) -> None:
        claimed_at = timestamp_pb2.Timestamp()
        claimed_at.FromDatetime(transfer.claimed_at)
        request = pb.RecordTicketTransferRequest(
            transfer_id=transfer.transfer_id,
            event_id=transfer.event_id,
            booking_id=transfer.hold_id,
            unit=transfer.unit,
            generation=transfer.generation,
            sender_customer_id=transfer.sender_id,
            receiver_customer_id=transfer.receiver_id,
            claimed_at=claimed_at,
        )
        await self._call("RecordTicketTransfer", request)

    async def close(self) -> None:
        await self._channel.close()


def _compliance(client: GrpcBookingClient) -> BookingClient:
    return client
