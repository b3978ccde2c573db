"""The edge's HTTP surface: every route, who may call it and acting as whom.

This table is the HTTP half of the authorization table (the gRPC half is
:data:`boxoffice.access.POLICY`): the server mounts exactly these routes
(each answered by the endpoint its area of :mod:`edge_svc.endpoints` names),
the OpenAPI document is generated from them (with the contracts' messages
and their ``google.api.http`` annotations), and the matrix test calls each
one as every kind of caller.

Who may call (:class:`Who`):

- ``PUBLIC``: anyone, signed in or not; the answer is the same for all
  (cacheable by a CDN when :attr:`Route.cache` is ``public``).
- ``FAN``: a signed-in fan (the session cookie, or an OpenID Connect bearer
  token); the edge asserts that fan to the services, never a customer named
  in the request.
- ``SHOPPER``: a signed-in fan who also holds the access token of the event
  (the HttpOnly cookie set on admission, or the ``Boxoffice-Access-Token``
  header); the token must name the same fan.
- ``PROVIDER``: the payment provider; its signature (checked by
  PaymentService) is the credential. The edge asserts no fan.
- ``DEVICE``: a gate device of the event, by its key (``Authorization:
  Device <key>``). The edge passes the key on untouched (the
  ``x-boxoffice-device-key`` metadata) and CheckInService decides: an
  unknown or revoked key is 401, a key of another event 403. The edge
  itself answers 401 to a request with no key and 403 to a fan's session or
  bearer token: a fan is never a gate.
- ``OPERATIONS``: whoever reaches the pod's port (kubelet, Prometheus);
  the Ingress routes none of them but ``/openapi.json``.

Routes that read or change a fan's things answer 404 for another fan's,
exactly as for one that does not exist.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Who(enum.Enum):
    """Who may call a route."""

    PUBLIC = "public"
    FAN = "fan"
    SHOPPER = "shopper"
    PROVIDER = "provider"
    DEVICE = "device"
    OPERATIONS = "operations"


class Cache(enum.Enum):
    """How an answer may be cached."""

    # Cache-Control: public, max-age (and stale-while-revalidate); the same for all.
    PUBLIC = "public"
    # Cache-Control: private, no-store; the caller's own.
    PRIVATE = "private"


_QUEUE = "/boxoffice.queue.v1.QueueService/"
_BOOKING = "/boxoffice.booking.v1.BookingService/"
_PAYMENT = "/boxoffice.payment.v1.PaymentService/"
_CHECKIN = "/boxoffice.checkin.v1.CheckInService/"


@dataclass(frozen=True, slots=True)
class Route:
    """One HTTP route of the edge."""

    # Operation id in the OpenAPI document (the RPC's name where it maps one).
    name: str
    method: str
    # Path template; parameters in braces, named as in the contracts.
    path: str
    who: Who
    # Whom the services see the call acting for.
    acting_as: str
    cache: Cache
    # The RPC the route is the HTTP form of (its google.api.http annotation),
    # or None for a route of the edge's own.
    rpc: str | None
    summary: str
    # Fields of the RPC's request the edge fills itself (from the path, the
    # session, the access token or a header); a body may not set them.
    edge_fields: tuple[str, ...] = ()
    # Whether the route answers Server-Sent Events.
    sse: bool = False
    # Whether the route streams newline-delimited JSON (one message of the
    # RPC's stream a line).
    ndjson: bool = False


_FAN = "the signed-in fan"
_NOBODY = "nobody (no fan is asserted)"
_DEVICE = "the gate device its key names (no fan is asserted)"

ROUTES: tuple[Route, ...] = (
    Route(
        "CreateSession",
        "POST",
        "/v1/session",
        Who.PUBLIC,
        "the fan it signs in",
        Cache.PRIVATE,
        None,
        "Development sign-in: a name becomes a signed session cookie (only when development sign-in is on).",
    ),
    Route(
        "GetSession",
        "GET",
        "/v1/session",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        None,
        "Who is signed in.",
    ),
    Route(
        "DeleteSession",
        "DELETE",
        "/v1/session",
        Who.PUBLIC,
        _NOBODY,
        Cache.PRIVATE,
        None,
        "Sign out: the session cookie stops working at once (on every edge), and the session and "
        "access-token cookies are cleared.",
    ),
    Route(
        "GetEvent",
        "GET",
        "/v1/events/{event_id}",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        f"{_BOOKING}GetEvent",
        "The event, its sections and prices.",
        ("event_id",),
    ),
    Route(
        "GetQueueChallenge",
        "GET",
        "/v1/events/{event_id}/queue/challenge",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        None,
        "The challenge a join of this event, or a registration for its fan draw, must answer "
        "(a proof-of-work to solve, an external check, or none).",
    ),
    Route(
        "JoinQueue",
        "POST",
        "/v1/events/{event_id}/queue:join",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_QUEUE}JoinQueue",
        "Join the event's waiting room (idempotent): the fan's place and score.",
        ("event_id", "customer_id", "client_id"),
    ),
    Route(
        "GetQueuePosition",
        "GET",
        "/v1/events/{event_id}/queue/position",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_QUEUE}GetQueuePosition",
        "The fan's state, approximate place, ETA and poll_after; once admitted, the access token.",
        ("event_id", "customer_id"),
    ),
    Route(
        "WatchQueuePosition",
        "GET",
        "/v1/events/{event_id}/queue/position:watch",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_QUEUE}WatchQueuePosition",
        "The fan's place as Server-Sent Events until a final state; Last-Event-ID resumes.",
        ("event_id", "customer_id"),
        sse=True,
    ),
    Route(
        "GetAdmissionProgress",
        "GET",
        "/v1/events/{event_id}/queue/progress",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        f"{_QUEUE}WatchAdmissionProgress",
        "The event's admission progress (admitted through which score, the rate, the room's state).",
        ("event_id",),
    ),
    Route(
        "GetPreQueueProof",
        "GET",
        "/v1/events/{event_id}/queue/proof",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        f"{_QUEUE}GetPreQueueProof",
        "The pre-queue shuffle's proof: the seed's commitment, and once open the seed and every participant in order.",
        ("event_id",),
    ),
    Route(
        "RegisterForFanDraw",
        "POST",
        "/v1/events/{event_id}/fan-draw:register",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_QUEUE}RegisterForFanDraw",
        "Register for the event's verified-fan draw (idempotent) until it closes, "
        "answering the join's challenge in Boxoffice-Proof.",
        ("event_id",),
    ),
    Route(
        "GetFanDrawResult",
        "GET",
        "/v1/events/{event_id}/fan-draw",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_QUEUE}GetFanDrawResult",
        "The fan's part in the event's verified-fan draw; a winner's access code.",
        ("event_id",),
    ),
    Route(
        "GetFanDrawProof",
        "GET",
        "/v1/events/{event_id}/fan-draw/proof",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        f"{_QUEUE}GetFanDrawProof",
        "The verified-fan draw's proof: the seed's commitment, and once drawn the seed and every registration in order.",
        ("event_id",),
    ),
    Route(
        "LeaveQueue",
        "POST",
        "/v1/events/{event_id}/queue:leave",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_QUEUE}LeaveQueue",
        "Leave the waiting room, or end the shopping session once admitted.",
        ("event_id", "customer_id"),
    ),
    Route(
        "ListEvents",
        "GET",
        "/v1/events",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        f"{_BOOKING}ListEvents",
        "The catalogue: published events soonest first, by words, kind, route, local date and start range; "
        "cacheable for its max age, with an ETag.",
    ),
    Route(
        "GetSeatMap",
        "GET",
        "/v1/events/{event_id}/seatmap",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        f"{_BOOKING}GetSeatMap",
        "The compact seat map, cacheable for its max age, with an ETag.",
        ("event_id",),
    ),
    Route(
        "HoldSeats",
        "POST",
        "/v1/events/{event_id}/holds",
        Who.SHOPPER,
        _FAN,
        Cache.PRIVATE,
        f"{_BOOKING}HoldSeats",
        "Hold explicit seats, the best available, or a general-admission quantity.",
        ("event_id", "access_token"),
    ),
    Route(
        "GetHold",
        "GET",
        "/v1/holds/{hold_id}",
        Who.SHOPPER,
        _FAN,
        Cache.PRIVATE,
        f"{_BOOKING}GetHold",
        "One of the fan's holds.",
        ("hold_id", "access_token"),
    ),
    Route(
        "ReleaseHold",
        "DELETE",
        "/v1/holds/{hold_id}",
        Who.SHOPPER,
        _FAN,
        Cache.PRIVATE,
        f"{_BOOKING}ReleaseHold",
        "Give one of the fan's holds back.",
        ("hold_id", "access_token"),
    ),
    Route(
        "StartPayment",
        "POST",
        "/v1/holds/{hold_id}/payment",
        Who.SHOPPER,
        _FAN,
        Cache.PRIVATE,
        f"{_PAYMENT}StartPayment",
        "Start paying for one of the fan's holds.",
        ("hold_id", "access_token"),
    ),
    Route(
        "ConfirmPayment",
        "POST",
        "/v1/payments/{payment_id}:confirm",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_PAYMENT}ConfirmPayment",
        "Settle one of the fan's payments; the Idempotency-Key header is the key.",
        ("payment_id", "idempotency_key"),
    ),
    Route(
        "GetPayment",
        "GET",
        "/v1/payments/{payment_id}",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_PAYMENT}GetPayment",
        "One of the fan's payments.",
        ("payment_id",),
    ),
    Route(
        "ListTickets",
        "GET",
        "/v1/events/{event_id}/tickets",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_PAYMENT}ListTickets",
        "The fan's tickets for the event.",
        ("event_id", "access_token"),
    ),
    Route(
        "GetCancellationQuote",
        "GET",
        "/v1/bookings/{booking_id}/cancellation",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_BOOKING}GetCancellationQuote",
        "What cancelling one of the fan's bookings would refund now under its event's policy, and until when; "
        "or why it may not be cancelled.",
        ("booking_id",),
    ),
    Route(
        "CancelBooking",
        "POST",
        "/v1/bookings/{booking_id}:cancel",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_PAYMENT}CancelBooking",
        "Cancel one of the fan's paid bookings for the refund of the quote they accepted (echoed in the body): "
        "the refund goes back through the provider, the tickets are voided and the seats return to sale; "
        "the Idempotency-Key header is the key.",
        ("booking_id", "idempotency_key"),
    ),
    Route(
        "JoinWaitlist",
        "POST",
        "/v1/events/{event_id}/waitlist:join",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_BOOKING}JoinWaitlist",
        "Join the waiting list of a sold-out event, for one section or any, for up to the event's per-customer "
        "limit of seats (idempotent); needs a place in the event's queue when it has one: the fan's entry.",
        ("event_id",),
    ),
    Route(
        "GetWaitlistEntry",
        "GET",
        "/v1/events/{event_id}/waitlist",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_BOOKING}GetWaitlistEntry",
        "The fan's entry on the event's waiting list: their state and the entries ahead; once OFFERED, the offer "
        "(a hold of their seats until it lapses) and its access token (a browser gets it as the HttpOnly cookie).",
        ("event_id",),
    ),
    Route(
        "LeaveWaitlist",
        "POST",
        "/v1/events/{event_id}/waitlist:leave",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_BOOKING}LeaveWaitlist",
        "Leave the event's waiting list; an open offer is declined and its seats go to the next fan.",
        ("event_id",),
    ),
    Route(
        "GetTicketRotation",
        "GET",
        "/v1/tickets/{ticket_id}/rotation",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_CHECKIN}GetTicketRotation",
        "The secret that makes one of the fan's tickets show a rotating code (another fan's ticket is 404).",
        ("ticket_id",),
    ),
    Route(
        "GetCheckInKeys",
        "GET",
        "/v1/events/{event_id}/checkin-keys",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        f"{_CHECKIN}GetCheckInKeys",
        "The public keys that verify ticket codes, a JSON Web Key Set; cacheable for its max age, with an ETag.",
        ("event_id",),
    ),
    Route(
        "Scan",
        "POST",
        "/v1/events/{event_id}/checkins",
        Who.DEVICE,
        _DEVICE,
        Cache.PRIVATE,
        f"{_CHECKIN}Scan",
        "A gate device's scan of a code: the verdict (ADMITTED once per ticket), the ticket and its first check-in.",
        ("event_id",),
    ),
    Route(
        "ExportCheckInList",
        "GET",
        "/v1/events/{event_id}/checkin-list",
        Who.DEVICE,
        _DEVICE,
        Cache.PRIVATE,
        f"{_CHECKIN}ExportCheckInList",
        "The event's check-in list for an offline gate, as newline-delimited JSON: every ticket (or the changes "
        "since a cursor), then a last line with the cursor to ask from next.",
        ("event_id",),
        ndjson=True,
    ),
    Route(
        "UploadScans",
        "POST",
        "/v1/events/{event_id}/checkins:upload",
        Who.DEVICE,
        _DEVICE,
        Cache.PRIVATE,
        f"{_CHECKIN}UploadScans",
        "An offline gate device's scans, applied in scan-time order; conflicts are recorded and reported.",
        ("event_id",),
    ),
    Route(
        "TransferTicket",
        "POST",
        "/v1/tickets/{ticket_id}:transfer",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_PAYMENT}TransferTicket",
        "Offer one of the fan's tickets to a friend: the friend gets a claim link by e-mail.",
        ("ticket_id",),
    ),
    Route(
        "ClaimTransfer",
        "POST",
        "/v1/transfers/{transfer_id}:claim",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_PAYMENT}ClaimTransfer",
        "Claim a ticket a friend transferred (the link's secret in the body): it is re-issued to the fan "
        "with a new code, and the old code no longer admits.",
        ("transfer_id",),
    ),
    Route(
        "CancelTransfer",
        "POST",
        "/v1/transfers/{transfer_id}:cancel",
        Who.FAN,
        _FAN,
        Cache.PRIVATE,
        f"{_PAYMENT}CancelTransfer",
        "Withdraw one of the fan's pending transfers.",
        ("transfer_id",),
    ),
    Route(
        "HandleProviderWebhook",
        "POST",
        "/v1/webhooks/payment-provider",
        Who.PROVIDER,
        _NOBODY,
        Cache.PRIVATE,
        f"{_PAYMENT}HandleProviderWebhook",
        "The payment provider's webhook: the raw body and signature header passed through untouched.",
        ("signature", "body"),
    ),
    Route(
        "GetIndexPage",
        "GET",
        "/",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        None,
        "The fan's page (static: the same for everyone; it reads the fan's state from the API).",
    ),
    Route(
        "GetEventPage",
        "GET",
        "/e/{event_id}",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        None,
        "The fan's page of one event (static, the same page as /).",
    ),
    Route(
        "GetGatePage",
        "GET",
        "/gate",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        None,
        "The gate page for staff phones (static: the same for everyone; the device key stays in the phone).",
    ),
    Route(
        "GetClaimPage",
        "GET",
        "/claim",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        None,
        "The page a transfer's claim link opens (static, the same page as /; the link's secret stays in its "
        "fragment, never sent to the server).",
    ),
    Route(
        "GetAsset",
        "GET",
        "/assets/{asset}",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        None,
        "A script, style sheet or image of the pages, under a content-hashed name (immutable).",
    ),
    Route("GetHealth", "GET", "/healthz", Who.OPERATIONS, _NOBODY, Cache.PRIVATE, None, "Liveness."),
    Route(
        "GetReadiness",
        "GET",
        "/readyz",
        Who.OPERATIONS,
        _NOBODY,
        Cache.PRIVATE,
        None,
        "Readiness: 503 while starting and draining.",
    ),
    Route("GetMetrics", "GET", "/metrics", Who.OPERATIONS, _NOBODY, Cache.PRIVATE, None, "Prometheus metrics."),
    Route(
        "GetOpenApi",
        "GET",
        "/openapi.json",
        Who.PUBLIC,
        _NOBODY,
        Cache.PUBLIC,
        None,
        "This document.",
    ),
)


def by_name(name: str) -> Route:
    """The route with operation id ``name``."""
    for route in ROUTES:
        if route.name == name:
            return route
    raise KeyError(name)
