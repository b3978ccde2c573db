"""Valid requests for every RPC of the authorization matrix
(tests/e2e/test_authorization_matrix.py), about a world made for each
caller: an event with seats and an open waiting room, a fan in its queue,
holds, a captured payment and a paid booking. A request that changes
something does so when a role the table allows sends it (the matrix checks
that too), so that a refused call that still did its work would change the
stores the matrix compares."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import duration_pb2
from google.protobuf.message import Message

from boxoffice.tokens import TokenSigner
from checkin_svc.gate import DEVICE_KEY_METADATA_KEY
from gen.boxoffice.booking.v1 import booking_admin_service_pb2 as bapb
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as cpb
from gen.boxoffice.mail.v1 import mail_admin_service_pb2 as mpb
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as qapb
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from payment_svc.adapters.sandbox import SandboxProvider
from payment_svc.ports import ConfirmedBooking, TicketUnit
from tests.e2e.checkout import open_event
from tests.e2e.harness import ts
from tests.edge.asserting import as_fan

# The fan the edge asserts in the matrix's calls, unless a request names another.
FAN = "fan-matrix"
# Another fan in the queue, whom RecordPresence sees (FAN may have left).
PRESENT = "fan-matrix-present"
# Fans in the queue whose place LeaveQueue ends and whose shopping session
# EndShoppingSession would end (ending FAN's would end the access token the
# other requests carry). No admitter runs here, so ENDING is not admitted
# and EndShoppingSession is refused for its own reason.
LEAVING = "fan-matrix-leaving"
# The friend who claims FAN's transferred ticket.
FRIEND = "fan-matrix-friend"
ENDING = "fan-matrix-ending"

_QUEUE = "/boxoffice.queue.v1.QueueService/"
_BOOKING = "/boxoffice.booking.v1.BookingService/"
_PAYMENT = "/boxoffice.payment.v1.PaymentService/"
_QUEUE_ADMIN = "/boxoffice.queue.v1.QueueAdminService/"
_BOOKING_ADMIN = "/boxoffice.booking.v1.BookingAdminService/"
_MAIL_ADMIN = "/boxoffice.mail.v1.MailAdminService/"
_CHECKIN = "/boxoffice.checkin.v1.CheckInService/"
_CHECKIN_ADMIN = "/boxoffice.checkin.v1.CheckInAdminService/"


@dataclass(frozen=True)
class Stubs:
    """The servers' stubs, each on a channel as a role the table allows."""

    queue: Any  # QueueService, as the operator
    queue_as_edge: Any
    booking: Any  # BookingService, as the operator
    booking_as_edge: Any
    payment_as_edge: Any
    checkin_admin: Any  # CheckInAdminService, as the operator
    # Writes a booking's tickets as the issuer does (no issuer runs here).
    issue: Callable[[ConfirmedBooking], Awaitable[object]]
    # A pending transfer's claim secret (the mailer's to read; the link's).
    claim_secret: Callable[[str], Awaitable[str]]


@dataclass(frozen=True)
class World:
    """What one caller's requests are about."""

    event_id: int
    # Ids of an event and a waiting room that do not exist yet.
    new_event_id: int
    token: str
    # Holds of FAN, HELD and unpaid, by use.
    holds: Mapping[str, bpb.Hold]
    # A payment captured and not confirmed, its provider's webhook about it
    # (body and signature), and a payment whose booking is paid.
    captured_payment_id: str
    webhook_body: bytes
    webhook_signature: str
    paid_payment_id: str
    paid_hold_id: str
    # A gate device of the event (its key), and one that RevokeGateDevice revokes.
    device_key: str
    revocable_device_id: str
    # A paid booking for the fan's own cancel (PaymentService.CancelBooking),
    # and its price (refunded in full: the event's policy refunds 100%).
    cancel_hold: bpb.Hold
    # FAN's ticket to transfer; a pending transfer of another with its
    # secret, to claim; and one to cancel.
    ticket_id: str
    claimable_transfer_id: str
    claim_secret: str
    cancellable_transfer_id: str
    # An event sold out (its one seat held by another fan), for the waiting list.
    waitlist_event_id: int


async def make_world(stubs: Stubs, tokens: TokenSigner, sandbox: SandboxProvider) -> World:
    """A fresh world, made through the servers as the roles allowed."""
    event_id = await open_event(
        stubs.booking, stubs.queue, name="Matrix", seats=16, refund_percent=100, max_seats_per_customer=16
    )
    fan = as_fan(FAN)
    for queued in (FAN, PRESENT, LEAVING, ENDING):
        joined = await stubs.queue_as_edge.JoinQueue(qpb.JoinQueueRequest(event_id=event_id), metadata=as_fan(queued))
        assert joined.position.state in (qpb.QUEUE_STATE_WAITING, qpb.QUEUE_STATE_ADMITTED)
    token, _ = tokens.issue(event_id=event_id, customer_id=FAN, ttl_seconds=3600)

    async def hold() -> bpb.Hold:
        reply = await stubs.booking_as_edge.HoldSeats(
            bpb.HoldSeatsRequest(
                access_token=token,
                event_id=event_id,
                best_available=bpb.BestAvailableSelection(section_id="A", quantity=1),
            ),
            metadata=fan,
        )
        held: bpb.Hold = reply.hold
        return held

    async def start(hold_id: str) -> str:
        reply = await stubs.payment_as_edge.StartPayment(
            ppb.StartPaymentRequest(access_token=token, hold_id=hold_id, payment_method="pm_card_ok"), metadata=fan
        )
        assert reply.payment.state == ppb.PAYMENT_STATE_CAPTURED, reply
        return str(reply.payment.payment_id)

    holds = {use: await hold() for use in ("release", "start", "extend", "confirm", "read")}
    captured = await start((await hold()).hold_id)
    (succeeded,) = [e for e in await sandbox.events(captured) if e.type == "charge.succeeded"]
    body = succeeded.to_body()
    paid_hold = await hold()
    paid = await start(paid_hold.hold_id)
    confirmed = await stubs.payment_as_edge.ConfirmPayment(
        ppb.ConfirmPaymentRequest(payment_id=paid, idempotency_key=f"matrix-{paid}"), metadata=fan
    )
    assert confirmed.payment.state == ppb.PAYMENT_STATE_SUCCEEDED, confirmed
    device = await stubs.checkin_admin.CreateGateDevice(cpb.CreateGateDeviceRequest(event_id=event_id, name="Matrix"))
    revocable = await stubs.checkin_admin.CreateGateDevice(
        cpb.CreateGateDeviceRequest(event_id=event_id, name="Matrix, to revoke")
    )
    cancel_hold = await hold()
    cancel_paid = await start(cancel_hold.hold_id)
    await stubs.payment_as_edge.ConfirmPayment(
        ppb.ConfirmPaymentRequest(payment_id=cancel_paid, idempotency_key=f"matrix-{cancel_paid}"), metadata=fan
    )
    tickets_hold = str(uuid.uuid4())
    await stubs.issue(
        ConfirmedBooking(
            source_event_id=str(uuid.uuid4()),
            event_id=event_id,
            hold_id=tickets_hold,
            customer_id=FAN,
            section_id="A",
            payment_id="",
            units=tuple(TicketUnit(unit, None, "") for unit in (1, 2, 3)),
        )
    )
    listed = await stubs.payment_as_edge.ListTickets(
        ppb.ListTicketsRequest(event_id=event_id, hold_id=tickets_hold), metadata=fan
    )
    to_transfer, to_claim, to_cancel = (t.ticket_id for t in listed.tickets)

    async def transfer(ticket_id: str) -> str:
        reply = await stubs.payment_as_edge.TransferTicket(
            ppb.TransferTicketRequest(ticket_id=ticket_id, email="friend@example.org"), metadata=fan
        )
        return str(reply.transfer.transfer_id)

    claimable = await transfer(to_claim)
    # An event whose one seat another fan holds: FAN may join its waiting list.
    waitlist_event_id = await open_event(stubs.booking, stubs.queue, name="Matrix, sold out", seats=1)
    other = "fan-matrix-other"
    other_token, _ = tokens.issue(event_id=waitlist_event_id, customer_id=other, ttl_seconds=3600)
    await stubs.booking_as_edge.HoldSeats(
        bpb.HoldSeatsRequest(
            access_token=other_token,
            event_id=waitlist_event_id,
            best_available=bpb.BestAvailableSelection(section_id="A", quantity=1),
        ),
        metadata=as_fan(other),
    )
    return World(
        event_id=event_id,
        waitlist_event_id=waitlist_event_id,
        new_event_id=int(uuid.uuid4().int % 10**12) + 10**6,
        token=token,
        holds=holds,
        captured_payment_id=captured,
        webhook_body=body,
        webhook_signature=sandbox.sign(body),
        paid_payment_id=paid,
        paid_hold_id=paid_hold.hold_id,
        device_key=device.key,
        revocable_device_id=revocable.device.device_id,
        cancel_hold=cancel_hold,
        ticket_id=to_transfer,
        claimable_transfer_id=claimable,
        claim_secret=await stubs.claim_secret(claimable),
        cancellable_transfer_id=await transfer(to_cancel),
    )


@dataclass(frozen=True)
class Call:
    """A request, the fan the edge asserts with it, and whether it changes
    the stores when a role the table allows sends it."""

    request: Message
    fan: str = FAN
    writes: bool = False
    # More metadata the edge sends with it (a gate device's key).
    metadata: tuple[tuple[str, str], ...] = ()


def _device(w: World) -> tuple[tuple[str, str], ...]:
    return ((DEVICE_KEY_METADATA_KEY, w.device_key),)


def _hours(n: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=3600 * n)


def _queue_config(event_id: int) -> qpb.EventQueueConfig:
    return qpb.EventQueueConfig(
        event_id=event_id,
        opens_at=ts(datetime.now(UTC) + timedelta(days=1)),
        admission_rate_per_second=50,
        max_active_shoppers=20,
    )


def _waiting_room(event_id: int) -> qapb.WaitingRoom:
    return qapb.WaitingRoom(
        event_id=event_id,
        opens_at=ts(datetime.now(UTC) + timedelta(days=1)),
        admission_rate_per_second=50,
        max_active_shoppers=20,
    )


def _event(w: World) -> bpb.CreateEventRequest:
    return bpb.CreateEventRequest(
        event_id=w.new_event_id,
        display_name="Matrix, another",
        kind=bpb.EVENT_KIND_CONCERT,
        starts_at=ts(datetime.now(UTC) + timedelta(days=30)),
        sections=[
            bpb.SectionSpec(
                section_id="B",
                display_name="Balcony",
                kind=bpb.SECTION_KIND_GENERAL_ADMISSION,
                capacity=10,
                price=bpb.Money(currency_code="EUR", amount_minor=2500),
            )
        ],
    )


def _managed_event(w: World) -> bapb.BookingAdminServiceCreateEventRequest:
    # BookingAdminService's messages have BookingService's field numbers.
    request = _event(w)
    request.event_id = w.new_event_id + 1
    return bapb.BookingAdminServiceCreateEventRequest.FromString(request.SerializeToString())


def _hold_id(use: str) -> Callable[[World], str]:
    return lambda w: str(w.holds[use].hold_id)


# Every RPC the queue, booking and payment servers serve, by full method.
REQUESTS: dict[str, Callable[[World], Call]] = {
    # The waiting room, for the fan.
    f"{_QUEUE}JoinQueue": lambda w: Call(qpb.JoinQueueRequest(event_id=w.event_id), fan="fan-matrix-new", writes=True),
    f"{_QUEUE}GetQueuePosition": lambda w: Call(qpb.GetQueuePositionRequest(event_id=w.event_id)),
    f"{_QUEUE}WatchQueuePosition": lambda w: Call(qpb.WatchQueuePositionRequest(event_id=w.event_id)),
    f"{_QUEUE}WatchAdmissionProgress": lambda w: Call(qpb.WatchAdmissionProgressRequest(event_id=w.event_id)),
    f"{_QUEUE}LeaveQueue": lambda w: Call(qpb.LeaveQueueRequest(event_id=w.event_id), fan=LEAVING, writes=True),
    f"{_QUEUE}EndShoppingSession": lambda w: Call(
        qpb.EndShoppingSessionRequest(event_id=w.event_id, reason=qpb.SESSION_END_REASON_ABANDONED),
        fan=ENDING,
    ),
    f"{_QUEUE}RecordPresence": lambda w: Call(
        qpb.RecordPresenceRequest(event_id=w.event_id, customer_ids=[PRESENT]), writes=True
    ),
    f"{_QUEUE}GetPreQueueProof": lambda w: Call(qpb.GetPreQueueProofRequest(event_id=w.event_id)),
    f"{_QUEUE}RegisterForFanDraw": lambda w: Call(qpb.RegisterForFanDrawRequest(event_id=w.event_id)),
    f"{_QUEUE}GetFanDrawResult": lambda w: Call(qpb.GetFanDrawResultRequest(event_id=w.event_id)),
    f"{_QUEUE}GetFanDrawProof": lambda w: Call(qpb.GetFanDrawProofRequest(event_id=w.event_id)),
    # The waiting room, for operators.
    f"{_QUEUE}CreateEventQueue": lambda w: Call(
        qpb.CreateEventQueueRequest(config=_queue_config(w.new_event_id)), writes=True
    ),
    f"{_QUEUE}UpdateEventQueue": lambda w: Call(
        qpb.UpdateEventQueueRequest(config=_queue_config(w.event_id)), writes=True
    ),
    f"{_QUEUE}GetEventQueue": lambda w: Call(qpb.GetEventQueueRequest(event_id=w.event_id)),
    f"{_QUEUE}PauseAdmission": lambda w: Call(qpb.PauseAdmissionRequest(event_id=w.event_id), writes=True),
    f"{_QUEUE}ResumeAdmission": lambda w: Call(qpb.ResumeAdmissionRequest(event_id=w.event_id)),
    f"{_QUEUE}GetQueueStats": lambda w: Call(qpb.GetQueueStatsRequest(event_id=w.event_id)),
    f"{_QUEUE_ADMIN}CreateWaitingRoom": lambda w: Call(
        qapb.CreateWaitingRoomRequest(config=_waiting_room(w.new_event_id + 2)), writes=True
    ),
    f"{_QUEUE_ADMIN}UpdateWaitingRoom": lambda w: Call(
        qapb.UpdateWaitingRoomRequest(config=_waiting_room(w.event_id)), writes=True
    ),
    f"{_QUEUE_ADMIN}GetWaitingRoom": lambda w: Call(qapb.GetWaitingRoomRequest(event_id=w.event_id)),
    f"{_QUEUE_ADMIN}OpenWaitingRoom": lambda w: Call(qapb.OpenWaitingRoomRequest(event_id=w.event_id)),
    f"{_QUEUE_ADMIN}PauseWaitingRoom": lambda w: Call(qapb.PauseWaitingRoomRequest(event_id=w.event_id), writes=True),
    f"{_QUEUE_ADMIN}ResumeWaitingRoom": lambda w: Call(qapb.ResumeWaitingRoomRequest(event_id=w.event_id)),
    f"{_QUEUE_ADMIN}GetWaitingRoomStats": lambda w: Call(qapb.GetWaitingRoomStatsRequest(event_id=w.event_id)),
    f"{_QUEUE_ADMIN}RevokeCustomer": lambda w: Call(
        qapb.RevokeCustomerRequest(event_id=w.event_id, customer_id=FAN, action=qapb.REVOKE_ACTION_END_PLACE),
        writes=True,
    ),
    f"{_QUEUE_ADMIN}CreateAccessCodes": lambda w: Call(
        qapb.CreateAccessCodesRequest(event_id=w.event_id, lane="", count=2, max_uses=1, label="matrix"),
    ),
    f"{_QUEUE_ADMIN}IssueStaffPass": lambda w: Call(
        qapb.IssueStaffPassRequest(event_id=w.event_id, staff_name="matrix", ttl=_hours(1))
    ),
    f"{_QUEUE_ADMIN}CreateFanDraw": lambda w: Call(qapb.CreateFanDrawRequest(event_id=w.event_id)),
    # Events and seats.
    f"{_BOOKING}CreateEvent": lambda w: Call(_event(w), writes=True),
    f"{_BOOKING}LoadInventory": lambda w: Call(
        bpb.LoadInventoryRequest(
            event_id=w.event_id,
            rows=[bpb.SeatRowSpec(section_id="A", row_label="Z", first_seat_number=1, seat_count=4)],
        ),
        writes=True,
    ),
    f"{_BOOKING}GetEvent": lambda w: Call(bpb.GetEventRequest(event_id=w.event_id)),
    f"{_BOOKING}GetSeatMap": lambda w: Call(bpb.GetSeatMapRequest(event_id=w.event_id, section_id="A")),
    f"{_BOOKING}ListEvents": lambda w: Call(bpb.ListEventsRequest(page_size=10)),
    f"{_BOOKING_ADMIN}CreateEvent": lambda w: Call(_managed_event(w), writes=True),
    f"{_BOOKING_ADMIN}LoadInventory": lambda w: Call(
        bapb.BookingAdminServiceLoadInventoryRequest(
            event_id=w.event_id,
            rows=[bapb.InventoryRow(section_id="A", row_label="Y", first_seat_number=1, seat_count=4)],
        ),
        writes=True,
    ),
    f"{_BOOKING_ADMIN}GetEventStats": lambda w: Call(bapb.GetEventStatsRequest(event_id=w.event_id)),
    # Holds and bookings.
    f"{_BOOKING}HoldSeats": lambda w: Call(
        bpb.HoldSeatsRequest(
            access_token=w.token,
            event_id=w.event_id,
            best_available=bpb.BestAvailableSelection(section_id="A", quantity=1),
        ),
        writes=True,
    ),
    f"{_BOOKING}GetHold": lambda w: Call(bpb.GetHoldRequest(access_token=w.token, hold_id=_hold_id("read")(w))),
    f"{_BOOKING}ListHolds": lambda w: Call(bpb.ListHoldsRequest(event_id=w.event_id, customer_id=FAN)),
    f"{_BOOKING}ReleaseHold": lambda w: Call(
        bpb.ReleaseHoldRequest(access_token=w.token, hold_id=_hold_id("release")(w)), writes=True
    ),
    f"{_BOOKING}ExtendHold": lambda w: Call(
        bpb.ExtendHoldRequest(
            hold_id=_hold_id("extend")(w), customer_id=FAN, extend_by=duration_pb2.Duration(seconds=900)
        ),
        writes=True,
    ),
    f"{_BOOKING}ConfirmHold": lambda w: Call(
        bpb.ConfirmHoldRequest(
            hold_id=_hold_id("confirm")(w),
            idempotency_key=f"matrix-confirm-{_hold_id('confirm')(w)}",
            payment_id=f"pay-matrix-{_hold_id('confirm')(w)}",
            amount_paid=w.holds["confirm"].amount,
        ),
        writes=True,
    ),
    f"{_BOOKING}CancelBooking": lambda w: Call(
        bpb.CancelBookingRequest(hold_id=w.paid_hold_id, customer_id=FAN, reason="matrix"), writes=True
    ),
    f"{_BOOKING}GetCancellationQuote": lambda w: Call(bpb.GetCancellationQuoteRequest(booking_id=w.paid_hold_id)),
    f"{_BOOKING}JoinWaitlist": lambda w: Call(
        bpb.JoinWaitlistRequest(event_id=w.waitlist_event_id, section_id="A", quantity=1), writes=True
    ),
    f"{_BOOKING}GetWaitlistEntry": lambda w: Call(bpb.GetWaitlistEntryRequest(event_id=w.waitlist_event_id)),
    f"{_BOOKING}LeaveWaitlist": lambda w: Call(bpb.LeaveWaitlistRequest(event_id=w.waitlist_event_id), writes=True),
    f"{_BOOKING}RecordTicketTransfer": lambda w: Call(
        bpb.RecordTicketTransferRequest(
            transfer_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"matrix-transfer-{w.paid_hold_id}")),
            event_id=w.event_id,
            booking_id=w.paid_hold_id,
            unit=1,
            generation=1,
            sender_customer_id=FAN,
            receiver_customer_id=FRIEND,
            claimed_at=ts(datetime.now(UTC)),
        ),
        writes=True,
    ),
    # Payments.
    f"{_PAYMENT}StartPayment": lambda w: Call(
        ppb.StartPaymentRequest(access_token=w.token, hold_id=_hold_id("start")(w), payment_method="pm_card_ok"),
        writes=True,
    ),
    f"{_PAYMENT}ConfirmPayment": lambda w: Call(
        ppb.ConfirmPaymentRequest(payment_id=w.captured_payment_id, idempotency_key=f"m-{w.captured_payment_id}"),
        writes=True,
    ),
    f"{_PAYMENT}HandleProviderWebhook": lambda w: Call(
        ppb.HandleProviderWebhookRequest(signature=w.webhook_signature, body=w.webhook_body), writes=True
    ),
    f"{_PAYMENT}RefundPayment": lambda w: Call(
        ppb.RefundPaymentRequest(
            payment_id=w.paid_payment_id,
            amount=ppb.Money(currency_code="EUR", amount_minor=100),
            reason="matrix",
            request_id=f"matrix-refund-{w.paid_payment_id}",
        ),
        writes=True,
    ),
    f"{_PAYMENT}GetPayment": lambda w: Call(ppb.GetPaymentRequest(payment_id=w.paid_payment_id)),
    f"{_PAYMENT}CancelBooking": lambda w: Call(
        ppb.CancelBookingRequest(
            booking_id=w.cancel_hold.hold_id,
            idempotency_key=f"matrix-cancel-{w.cancel_hold.hold_id}",
            quoted_refund=ppb.Money(
                currency_code=w.cancel_hold.amount.currency_code, amount_minor=w.cancel_hold.amount.amount_minor
            ),
        ),
        writes=True,
    ),
    f"{_PAYMENT}ListTickets": lambda w: Call(ppb.ListTicketsRequest(access_token=w.token, event_id=w.event_id)),
    # The ticket e-mails: the paid booking has none yet, so a resend opens
    # its tickets delivery (and its audit row).
    f"{_MAIL_ADMIN}ResendTickets": lambda w: Call(mpb.ResendTicketsRequest(booking_id=w.paid_hold_id), writes=True),
    f"{_MAIL_ADMIN}ListDeliveries": lambda w: Call(mpb.ListDeliveriesRequest(booking_id=w.paid_hold_id)),
    # The door: gate devices through the edge (no ticket is issued here, so
    # a scan judges a code nobody holds), a fan's rotation, gate devices.
    f"{_CHECKIN}Scan": lambda w: Call(
        cpb.ScanRequest(event_id=w.event_id, code="TKT-0123456789ABCDEF", gate_id="matrix"), metadata=_device(w)
    ),
    f"{_CHECKIN}ExportCheckInList": lambda w: Call(
        cpb.ExportCheckInListRequest(event_id=w.event_id), metadata=_device(w)
    ),
    f"{_CHECKIN}UploadScans": lambda w: Call(
        cpb.UploadScansRequest(
            event_id=w.event_id,
            scans=[cpb.OfflineScan(code="TKT-0123456789ABCDEF", gate_id="matrix", scanned_at=ts(datetime.now(UTC)))],
        ),
        metadata=_device(w),
    ),
    f"{_CHECKIN}GetCheckInKeys": lambda w: Call(cpb.GetCheckInKeysRequest(event_id=w.event_id)),
    f"{_CHECKIN}GetTicketRotation": lambda w: Call(cpb.GetTicketRotationRequest(ticket_id=str(uuid.uuid4()))),
    f"{_CHECKIN_ADMIN}CreateGateDevice": lambda w: Call(
        cpb.CreateGateDeviceRequest(event_id=w.event_id, name="Matrix gate"), writes=True
    ),
    f"{_CHECKIN_ADMIN}RevokeGateDevice": lambda w: Call(
        cpb.RevokeGateDeviceRequest(device_id=w.revocable_device_id), writes=True
    ),
    f"{_CHECKIN_ADMIN}ListGateDevices": lambda w: Call(cpb.ListGateDevicesRequest(event_id=w.event_id)),
    f"{_PAYMENT}TransferTicket": lambda w: Call(
        ppb.TransferTicketRequest(ticket_id=w.ticket_id, email="friend@example.org"), writes=True
    ),
    f"{_PAYMENT}ClaimTransfer": lambda w: Call(
        ppb.ClaimTransferRequest(transfer_id=w.claimable_transfer_id, claim_secret=w.claim_secret),
        fan=FRIEND,
        writes=True,
    ),
    f"{_PAYMENT}CancelTransfer": lambda w: Call(
        ppb.CancelTransferRequest(transfer_id=w.cancellable_transfer_id), writes=True
    ),
}
