"""PaymentService's wire <-> model conversions: request fields parsed into
domain values (INVALID_ARGUMENT when they do not parse), domain values
written as messages."""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from google.protobuf import timestamp_pb2

from boxoffice import tokens, validate
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from payment_svc.model import Payment, PaymentState, Ticket, Transfer, TransferState

CURRENCY = re.compile(r"[A-Z]{3}")
_STATES = {
    PaymentState.PENDING: pb.PAYMENT_STATE_PENDING,
    PaymentState.CAPTURED: pb.PAYMENT_STATE_CAPTURED,
    PaymentState.SUCCEEDED: pb.PAYMENT_STATE_SUCCEEDED,
    PaymentState.DECLINED: pb.PAYMENT_STATE_DECLINED,
    PaymentState.FAILED: pb.PAYMENT_STATE_FAILED,
    PaymentState.REFUND_REQUIRED: pb.PAYMENT_STATE_REFUND_REQUIRED,
    PaymentState.REFUNDED: pb.PAYMENT_STATE_REFUNDED,
    PaymentState.PARTIALLY_REFUNDED: pb.PAYMENT_STATE_PARTIALLY_REFUNDED,
}

_TRANSFER_STATES = {
    TransferState.PENDING: pb.TRANSFER_STATE_PENDING,
    TransferState.CLAIMED: pb.TRANSFER_STATE_CLAIMED,
    TransferState.CANCELLED: pb.TRANSFER_STATE_CANCELLED,
}
# A plausible address (the relay is the judge of the rest), as the edge's.
_EMAIL = re.compile(r"[^@\s\x00-\x1f\x7f]{1,64}@[^@\s\x00-\x1f\x7f]{1,253}")

# -- from the wire


def parse_email(field: str, value: str) -> str:
    """An e-mail address of a plausible shape, 3 to 254 characters."""
    email = validate.text(field, value.strip(), max_length=254, min_length=3)
    if not _EMAIL.fullmatch(email):
        raise validate.invalid(field, "must be an e-mail address")
    return email


def parse_uuid(field: str, value: str) -> str:
    """A canonical UUID string; INVALID_ARGUMENT otherwise."""
    if not value:
        raise validate.required(field)
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise validate.invalid(field, "must be a UUID") from None


def access_token(value: str) -> str:
    """An access token present and of a sane length (verified by the signer):
    UNAUTHENTICATED otherwise, with the reasons BookingService answers."""
    return tokens.presented(value)


# -- to the wire


def _timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value)
    return stamp


def payment_to_proto(payment: Payment) -> pb.Payment:
    return pb.Payment(
        payment_id=payment.payment_id,
        hold_id=payment.hold_id,
        event_id=payment.event_id,
        customer_id=payment.customer_id,
        amount=pb.Money(currency_code=payment.currency, amount_minor=payment.amount_minor),
        state=_STATES[payment.state],
        provider_payment_id=payment.provider_payment_id,
        failure_reason=payment.failure_reason,
        refunded=pb.Money(currency_code=payment.currency, amount_minor=payment.refunded_minor),
        create_time=_timestamp(payment.created_at),
        update_time=_timestamp(payment.updated_at),
    )


def ticket_to_proto(ticket: Ticket) -> pb.Ticket:
    return pb.Ticket(
        ticket_id=ticket.ticket_id,
        event_id=ticket.event_id,
        hold_id=ticket.hold_id,
        customer_id=ticket.customer_id,
        section_id=ticket.section_id,
        seat_id=ticket.seat_id or 0,
        seat_label=ticket.seat_label,
        sandbox=ticket.sandbox,
        unit=ticket.unit,
        code=ticket.code,
        state=pb.TICKET_STATE_VOID if ticket.voided_at is not None else pb.TICKET_STATE_VALID,
        issue_time=_timestamp(ticket.issued_at),
        payment_id=ticket.payment_id,
        pending_transfer=None if ticket.pending_transfer is None else transfer_to_proto(ticket.pending_transfer),
    )


def transfer_to_proto(transfer: Transfer) -> pb.Transfer:
    message = pb.Transfer(
        transfer_id=transfer.transfer_id,
        ticket_id=transfer.ticket_id,
        event_id=transfer.event_id,
        email=transfer.email,
        state=_TRANSFER_STATES[transfer.state],
        create_time=_timestamp(transfer.created_at),
        new_ticket_id=transfer.new_ticket_id or "",
    )
    if transfer.ended_at is not None:
        message.update_time.CopyFrom(_timestamp(transfer.ended_at))
    return message
