"""Who may call what: the one authorization table of the mesh.

Every process of the mesh has an identity, a SPIFFE ID in its certificate
(``spiffe://<trust-domain>/ns/<namespace>/sa/<role>``); the role is what
this table speaks of. An RPC not in the table answers nobody. The table
names contract methods, not code, so the runtime that enforces it imports
no service; the Kubernetes NetworkPolicies and Istio AuthorizationPolicies
are checked against it.

Customer-scoped RPCs are the edge's: the edge calls them for the fan it
asserts (see :mod:`boxoffice.caller`), and the service takes the customer
from that assertion or from an access token, never from the request body.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# The roles of the mesh. People and tools of the operators carry "operator".
EDGE = "edge"
QUEUE = "queue"
BOOKING = "booking"
PAYMENT = "payment"
ADMITTER = "admitter"
SWEEPER = "sweeper"
RELAY = "relay"
ISSUER = "issuer"
MAILER = "mailer"
CHECKIN = "checkin"
OPERATOR = "operator"
ROLES = (EDGE, QUEUE, BOOKING, PAYMENT, ADMITTER, SWEEPER, RELAY, ISSUER, MAILER, CHECKIN, OPERATOR)

# Callers with no certificate of this mesh, for the probes' health checks.
ANYONE = "*"

_QUEUE = "/boxoffice.queue.v1.QueueService/"
_BOOKING = "/boxoffice.booking.v1.BookingService/"
_PAYMENT = "/boxoffice.payment.v1.PaymentService/"
_QUEUE_ADMIN = "/boxoffice.queue.v1.QueueAdminService/"
_BOOKING_ADMIN = "/boxoffice.booking.v1.BookingAdminService/"
_MAIL_ADMIN = "/boxoffice.mail.v1.MailAdminService/"
_CHECKIN = "/boxoffice.checkin.v1.CheckInService/"
_CHECKIN_ADMIN = "/boxoffice.checkin.v1.CheckInAdminService/"


def _table() -> Mapping[str, frozenset[str]]:
    table: dict[str, set[str]] = {
        # The waiting room: the fan's own place, through the edge.
        f"{_QUEUE}JoinQueue": {EDGE},
        f"{_QUEUE}GetQueuePosition": {EDGE},
        f"{_QUEUE}WatchQueuePosition": {EDGE},
        f"{_QUEUE}LeaveQueue": {EDGE},
        f"{_QUEUE}EndShoppingSession": {EDGE},
        f"{_QUEUE}WatchAdmissionProgress": {EDGE},
        f"{_QUEUE}RecordPresence": {EDGE},
        f"{_QUEUE}GetPreQueueProof": {EDGE, OPERATOR},
        # The verified-fan draw: fans through the edge, the proof for anyone.
        f"{_QUEUE}RegisterForFanDraw": {EDGE},
        f"{_QUEUE}GetFanDrawResult": {EDGE},
        f"{_QUEUE}GetFanDrawProof": {EDGE, OPERATOR},
        # Waiting-room administration: operators only.
        f"{_QUEUE}CreateEventQueue": {OPERATOR},
        f"{_QUEUE}UpdateEventQueue": {OPERATOR},
        f"{_QUEUE}PauseAdmission": {OPERATOR},
        f"{_QUEUE}ResumeAdmission": {OPERATOR},
        f"{_QUEUE}GetQueueStats": {OPERATOR},
        f"{_QUEUE}GetEventQueue": {OPERATOR, EDGE},
        # Events and seats: public reads through the edge; writes by operators.
        f"{_BOOKING}CreateEvent": {OPERATOR},
        f"{_BOOKING}LoadInventory": {OPERATOR},
        f"{_BOOKING}GetEvent": {EDGE, OPERATOR},
        f"{_BOOKING}GetSeatMap": {EDGE, OPERATOR},
        f"{_BOOKING}ListEvents": {EDGE, OPERATOR},
        # Holds: the fan's own, through the edge; payment reads the hold it charges.
        f"{_BOOKING}HoldSeats": {EDGE},
        f"{_BOOKING}GetHold": {EDGE, PAYMENT},
        f"{_BOOKING}ListHolds": {EDGE, OPERATOR},
        f"{_BOOKING}ReleaseHold": {EDGE},
        # Only payment moves a hold towards a sale.
        f"{_BOOKING}ExtendHold": {PAYMENT},
        f"{_BOOKING}ConfirmHold": {PAYMENT},
        # Payment tells booking of the transfers its claims committed.
        f"{_BOOKING}RecordTicketTransfer": {PAYMENT},
        # A fan cancels their own booking; an operator anyone's; payment
        # cancels the booking whose payment it refunds (the cancellation
        # policy decides the refund).
        f"{_BOOKING}CancelBooking": {EDGE, OPERATOR, PAYMENT},
        # What cancelling would refund: the fan's own booking, an operator's any.
        f"{_BOOKING}GetCancellationQuote": {EDGE, OPERATOR},
        # The waiting list: the fan's own place, the edge asserting the fan.
        f"{_BOOKING}JoinWaitlist": {EDGE},
        f"{_BOOKING}GetWaitlistEntry": {EDGE},
        f"{_BOOKING}LeaveWaitlist": {EDGE},
        # Payments: the fan's own, through the edge; refunds by operators.
        f"{_PAYMENT}StartPayment": {EDGE},
        f"{_PAYMENT}ConfirmPayment": {EDGE},
        f"{_PAYMENT}GetPayment": {EDGE, OPERATOR},
        f"{_PAYMENT}ListTickets": {EDGE},
        # Ticket transfers: customer-scoped, the edge asserting the fan.
        f"{_PAYMENT}TransferTicket": {EDGE},
        f"{_PAYMENT}ClaimTransfer": {EDGE},
        f"{_PAYMENT}CancelTransfer": {EDGE},
        f"{_PAYMENT}RefundPayment": {OPERATOR},
        # A fan cancels their own paid booking for the refund they were quoted.
        f"{_PAYMENT}CancelBooking": {EDGE},
        # The provider's webhook arrives through the edge; the sandbox
        # provider inside payment delivers its own.
        f"{_PAYMENT}HandleProviderWebhook": {EDGE, PAYMENT},
        # The door (served by the checkin role). Gate devices call through the
        # edge with a device key, which the service checks: the mesh
        # identity says only that the edge passes the call on. Scans, the
        # check-in list and uploads are the devices' alone: an operator's
        # identity is no gate device (an operator at a gate uses a device
        # key through the edge, as the staff do), so they are the edge's
        # only. A ticket's rotation secret is its holder's, through the edge.
        # The public keys are public: the edge serves them, and operators'
        # tools read them.
        f"{_CHECKIN}Scan": {EDGE},
        f"{_CHECKIN}ExportCheckInList": {EDGE},
        f"{_CHECKIN}UploadScans": {EDGE},
        f"{_CHECKIN}GetTicketRotation": {EDGE},
        f"{_CHECKIN}GetCheckInKeys": {EDGE, OPERATOR},
        # The admin services: operators only, every change audited.
        f"{_QUEUE_ADMIN}CreateWaitingRoom": {OPERATOR},
        f"{_QUEUE_ADMIN}UpdateWaitingRoom": {OPERATOR},
        f"{_QUEUE_ADMIN}GetWaitingRoom": {OPERATOR},
        f"{_QUEUE_ADMIN}OpenWaitingRoom": {OPERATOR},
        f"{_QUEUE_ADMIN}PauseWaitingRoom": {OPERATOR},
        f"{_QUEUE_ADMIN}ResumeWaitingRoom": {OPERATOR},
        f"{_QUEUE_ADMIN}GetWaitingRoomStats": {OPERATOR},
        f"{_QUEUE_ADMIN}RevokeCustomer": {OPERATOR},
        f"{_QUEUE_ADMIN}CreateAccessCodes": {OPERATOR},
        f"{_QUEUE_ADMIN}IssueStaffPass": {OPERATOR},
        f"{_QUEUE_ADMIN}CreateFanDraw": {OPERATOR},
        f"{_BOOKING_ADMIN}CreateEvent": {OPERATOR},
        f"{_BOOKING_ADMIN}LoadInventory": {OPERATOR},
        f"{_BOOKING_ADMIN}GetEventStats": {OPERATOR},
        # The ticket e-mails' deliveries and their resend (served by payment's process).
        f"{_MAIL_ADMIN}ResendTickets": {OPERATOR},
        f"{_MAIL_ADMIN}ListDeliveries": {OPERATOR},
        f"{_CHECKIN_ADMIN}CreateGateDevice": {OPERATOR},
        f"{_CHECKIN_ADMIN}RevokeGateDevice": {OPERATOR},
        f"{_CHECKIN_ADMIN}ListGateDevices": {OPERATOR},
        # Probes carry no certificate; reflection is for the mesh's own tools.
        "/grpc.health.v1.Health/Check": {ANYONE},
        "/grpc.health.v1.Health/Watch": {ANYONE},
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": set(ROLES),
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": set(ROLES),
    }
    return MappingProxyType({method: frozenset(roles) for method, roles in table.items()})


POLICY: Mapping[str, frozenset[str]] = _table()


def allowed(full_method: str, role: str | None) -> bool:
    """Whether a caller of ``role`` (None: no identity of this mesh) may call
    ``full_method`` (``/package.Service/Method``)."""
    roles = POLICY.get(full_method)
    if roles is None:
        return False
    return ANYONE in roles or (role is not None and role in roles)


def role_of(spiffe_id: str, trust_domain: str, namespaces: frozenset[str] | None = None) -> str | None:
    """The role named by ``spiffe://<trust_domain>/ns/<ns>/sa/<role>``, or
    None for an ID of another trust domain or shape, or (``namespaces``
    given) of a namespace not among them."""
    prefix = f"spiffe://{trust_domain}/ns/"
    if not spiffe_id.startswith(prefix):
        return None
    parts = spiffe_id[len(prefix) :].split("/")
    if len(parts) != 3 or parts[1] != "sa" or not parts[0] or parts[2] not in ROLES:
        return None
    if namespaces is not None and parts[0] not in namespaces:
        return None
    return parts[2]


def namespace_of(spiffe_id: str, trust_domain: str) -> str | None:
    """The namespace of a mesh identity of ``trust_domain`` (None for any other ID)."""
    if role_of(spiffe_id, trust_domain) is None:
        return None
    return spiffe_id[len(f"spiffe://{trust_domain}/ns/") :].split("/")[0]


def spiffe_id(trust_domain: str, namespace: str, role: str) -> str:
    """The identity of ``role`` in ``namespace``."""
    return f"spiffe://{trust_domain}/ns/{namespace}/sa/{role}"
