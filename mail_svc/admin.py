"""boxoffice.mail.v1.MailAdminService: the operators' view of a booking's
ticket e-mails, and their resend.

:class:`MailAdmin` holds the use cases; a resend runs through the
:class:`boxoffice.audit.Auditor` (the one place an admin action is
recorded), on the auditor's pool, so that the deliveries it queues commit
with their audit row. It sends nothing itself: it queues the deliveries in
Postgres and the mailers' resend sweep sends them, each with its own
Message-ID. No answer, and no audit row, carries the fan's address.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

import grpc
from google.protobuf import timestamp_pb2

from boxoffice import validate
from boxoffice.audit import Auditor, Json, message_json
from boxoffice.errors import NotFound
from boxoffice.server import Registration
from gen.boxoffice.mail.v1 import mail_admin_service_pb2 as pb
from gen.boxoffice.mail.v1 import mail_admin_service_pb2_grpc as pb_grpc
from mail_svc.model import Delivery, DeliveryState, Kind

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["MailAdminService"].full_name
RESEND_METHOD = f"/{SERVICE_NAME}/ResendTickets"

Context = grpc.aio.ServicerContext[Any, Any]

_KINDS = {Kind.TICKETS: pb.MESSAGE_KIND_TICKETS, Kind.VOID: pb.MESSAGE_KIND_VOID}
_STATES = {
    DeliveryState.PENDING: pb.DELIVERY_STATE_PENDING,
    DeliveryState.SENT: pb.DELIVERY_STATE_SENT,
    DeliveryState.FAILED: pb.DELIVERY_STATE_FAILED,
    DeliveryState.NO_ADDRESS: pb.DELIVERY_STATE_NO_ADDRESS,
}


class AdminDeliveries(Protocol):
    """What the admin reads and changes of the mailer's records."""

    async def deliveries(self, hold_id: str) -> list[Delivery]:
        """The booking's deliveries, tickets first."""

    async def paid_event(self, hold_id: str) -> int | None:
        """The event of the booking's paid payment (None: no paid payment)."""

    async def queue_resend(self, hold_id: str, *, new_tickets: tuple[int, str] | None) -> list[Delivery]:
        """Queue what did not go out (and open a tickets delivery when asked); those queued."""


def booking_id(value: str) -> str:
    """A request's booking id: a UUID, in its canonical form."""
    if not value:
        raise validate.required("booking_id")
    if len(value) > 64:
        raise validate.invalid("booking_id", "must be a booking id (a UUID)")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise validate.invalid("booking_id", "must be a booking id (a UUID)") from None


def _timestamp(when: datetime | None) -> timestamp_pb2.Timestamp | None:
    if when is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(when)
    return stamp


def delivery_pb(delivery: Delivery, *, resend_queued: bool = False) -> pb.Delivery:
    return pb.Delivery(
        kind=_KINDS[delivery.kind],
        state=_STATES[delivery.state],
        attempts=delivery.attempts,
        last_error=delivery.last_error,
        sent_time=_timestamp(delivery.sent_at),
        message_id=delivery.message_id,
        update_time=_timestamp(delivery.updated_at),
        resend_queued=resend_queued,
    )


def _deliveries_json(deliveries: Sequence[Delivery]) -> Json:
    return {"deliveries": [message_json(delivery_pb(d)) for d in deliveries]}


class MailAdmin:
    """A booking's deliveries, and their resend (audited)."""

    def __init__(self, *, store: AdminDeliveries, auditor: Auditor, message_id: Callable[[str, Kind], str]) -> None:
        self._store = store
        self._audit = auditor
        self._message_id = message_id

    async def deliveries(self, hold_id: str) -> list[Delivery]:
        found = await self._store.deliveries(hold_id)
        if not found and await self._store.paid_event(hold_id) is None:
            raise _not_found(hold_id)
        return found

    async def resend(self, request: pb.ResendTicketsRequest, hold_id: str) -> list[tuple[Delivery, bool]]:
        """The booking's deliveries as found, each with whether this call
        queued it; NOT_FOUND for a booking the mail knows nothing of."""
        found: list[Delivery] = []
        queued: list[Delivery] = []

        async def before() -> Json | None:
            return _deliveries_json(await self._store.deliveries(hold_id))

        async def action() -> list[Delivery]:
            found[:] = await self._store.deliveries(hold_id)
            new_tickets: tuple[int, str] | None = None
            if not any(d.kind is Kind.TICKETS for d in found):
                event_id = await self._store.paid_event(hold_id)
                if event_id is None and not found:
                    raise _not_found(hold_id)
                if event_id is not None:
                    new_tickets = (event_id, self._message_id(hold_id, Kind.TICKETS))
            queued[:] = await self._store.queue_resend(hold_id, new_tickets=new_tickets)
            return await self._store.deliveries(hold_id)

        await self._audit.run(RESEND_METHOD, request, before=before, action=action, after=_deliveries_json)
        kinds = {d.kind for d in queued}
        known = {d.kind for d in found}
        # As found, then a tickets delivery this call opened (never sent, now queued).
        return [(d, d.kind in kinds) for d in found] + [(d, True) for d in queued if d.kind not in known]


def _not_found(hold_id: str) -> NotFound:
    return NotFound(
        f"booking {hold_id} has no paid payment, no tickets e-mail and no record of any",
        reason="BOOKING_NOT_FOUND",
        metadata={"booking_id": hold_id},
    )


class MailAdminServicer(pb_grpc.MailAdminServiceServicer):
    """The gRPC face of MailAdmin."""

    def __init__(self, admin: MailAdmin) -> None:
        self._admin = admin

    def registration(self) -> Registration:
        add: Callable[[Any, grpc.aio.Server], None] = pb_grpc.add_MailAdminServiceServicer_to_server
        return Registration(SERVICE_NAME, lambda server: add(self, server))

    async def ResendTickets(self, request: pb.ResendTicketsRequest, context: Context) -> pb.ResendTicketsResponse:
        hold_id = booking_id(request.booking_id)
        found = await self._admin.resend(request, hold_id)
        return pb.ResendTicketsResponse(deliveries=[delivery_pb(d, resend_queued=q) for d, q in found])

    async def ListDeliveries(self, request: pb.ListDeliveriesRequest, context: Context) -> pb.ListDeliveriesResponse:
        found = await self._admin.deliveries(booking_id(request.booking_id))
        return pb.ListDeliveriesResponse(deliveries=[delivery_pb(d) for d in found])
