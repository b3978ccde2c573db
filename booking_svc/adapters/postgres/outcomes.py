"""Where Postgres outcomes become domain errors, in both directions, and
nowhere else: the SQL functions report what happened by outcome name (a
hold's rule it failed, a confirm's stored answer) and this module owns the
code, reason and message of each.

- :func:`hold_error`: a hold's outcome (a row of ``booking_hold_seats``)
  as the error its caller gets.
- :func:`late_holds`: the positions of holds that finished past their
  deadline, when ``booking_hold_seats`` failed for that reason.
- :func:`confirm_answer`: a stored ConfirmHold answer (``booking_confirm_hold``)
  as the hold, or its error raised. Answers stored before outcomes had names
  carry a canonical code name, reason and message; they replay as given,
  through :func:`boxoffice.errors.error_class_for_code`.
- :func:`confirm_conflict`: the two answers a key cannot give (a twin in
  flight, a key used for another confirmation).
"""

from __future__ import annotations

from typing import Any

import psycopg

from booking_svc.model import Hold, QuantitySelection, Selection
from boxoffice.errors import (
    Aborted,
    BoxofficeError,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    error_class_for_code,
)
from boxoffice.money import format_minor_text

# The message booking_hold_seats fails with when winners finished past
# their callers' deadlines (their 1-based positions in DETAIL).
_LATE = "DEADLINE_EXCEEDED"


def hold_error(outcome: str, detail: str, *, event_id: int, selection: Selection) -> BoxofficeError:
    """The error for a hold that ``booking_hold_seats`` answered with
    ``outcome`` (and its ``detail``)."""
    section = selection.section_id if isinstance(selection, QuantitySelection) else ""
    match outcome:
        case "SEAT_UNAVAILABLE":
            return FailedPrecondition(
                f"seats {detail} are not available", reason="SEAT_UNAVAILABLE", metadata={"seat_ids": detail}
            )
        case "SOLD_OUT":
            return ResourceExhausted(
                "the section is sold out",
                reason="SOLD_OUT",
                metadata={"event_id": str(event_id), "section_id": section},
            )
        case "CUSTOMER_HOLD_LIMIT":
            limit, _, held = detail.partition(",")
            return FailedPrecondition(
                f"a customer may hold at most {limit} seats of this event at once",
                reason="CUSTOMER_HOLD_LIMIT",
                metadata={"limit": limit, "held": held},
            )
        case "TICKET_LIMIT_REACHED":
            limit, _, rest = detail.partition(",")
            held, _, bought = rest.partition(",")
            return ticket_limit_error(limit=limit, held=held, bought=bought)
        case "REQUEST_ID_REUSED":
            return InvalidArgument(
                "request_id was already used for another selection",
                reason="REQUEST_ID_REUSED",
                metadata={"field": "request_id"},
            )
        case "EVENT_NOT_FOUND":
            return NotFound(
                f"event {event_id} does not exist", reason="EVENT_NOT_FOUND", metadata={"event_id": str(event_id)}
            )
        case "UNKNOWN_SECTION":
            return InvalidArgument(
                f"section {detail!r} does not exist in event {event_id}",
                reason="UNKNOWN_SECTION",
                metadata={"field": "best_available.section_id", "section_id": detail},
            )
        case "UNKNOWN_SEAT":
            return InvalidArgument(
                f"seats {detail} do not exist in event {event_id}",
                reason="UNKNOWN_SEAT",
                metadata={"field": "seats.seat_ids", "seat_ids": detail},
            )
        case "SEATS_IN_SEVERAL_SECTIONS":
            return InvalidArgument(
                "the seats must all be in one section",
                reason="SEATS_IN_SEVERAL_SECTIONS",
                metadata={"field": "seats.seat_ids"},
            )
        case "NOT_ENOUGH_SEATS":
            return ResourceExhausted(
                f"only {detail} seats are left in the section",
                reason="NOT_ENOUGH_SEATS",
                metadata={"available": detail, "section_id": section},
            )
        case "SEATS_CONTENDED":
            return Aborted(
                "the free seats are being taken by other customers; try again",
                reason="SEATS_CONTENDED",
                metadata={"section_id": section},
            )
        case "DEADLINE_EXCEEDED":
            return late_error()
    return Internal(f"the hold failed with an unknown outcome {outcome!r}", reason="INTERNAL")


def ticket_limit_error(*, limit: str, held: str, bought: str, hold_id: str | None = None) -> FailedPrecondition:
    """The customer's tickets in the event, bought and held, would pass the
    event's ticket limit."""
    metadata = {"limit": limit, "held": held, "bought": bought}
    if hold_id is not None:
        metadata["hold_id"] = hold_id
    return FailedPrecondition(
        f"a customer may have at most {limit} tickets of this event, bought and held together "
        f"(bought {bought}, held {held})",
        reason="TICKET_LIMIT_REACHED",
        metadata=metadata,
    )


def late_error() -> DeadlineExceeded:
    """A hold that could not be made within its caller's deadline."""
    return DeadlineExceeded("the hold could not be made within the deadline", reason="DEADLINE_EXCEEDED")


def late_holds(err: psycopg.Error) -> list[int] | None:
    """The 1-based positions of the holds that finished past their
    deadlines, when ``err`` is ``booking_hold_seats`` saying so; else None."""
    if not isinstance(err, psycopg.errors.RaiseException) or err.diag.message_primary != _LATE:
        return None
    return [int(n) for n in (err.diag.message_detail or "").split(",") if n]


def confirm_conflict(*, in_flight: bool, key_reused: bool) -> BoxofficeError | None:
    """The error when a confirmation key has no answer to give."""
    if in_flight:
        return Aborted("a confirmation with this key is in flight", reason="CONFIRMATION_IN_FLIGHT")
    if key_reused:
        return InvalidArgument(
            "idempotency_key was already used for another confirmation",
            reason="IDEMPOTENCY_KEY_REUSED",
            metadata={"field": "idempotency_key"},
        )
    return None


def confirm_answer(stored: dict[str, Any]) -> Hold:
    """A stored ConfirmHold answer: the hold, or its error raised."""
    if "hold" in stored:
        return Hold.from_json(stored["hold"])
    error: dict[str, Any] = stored["error"]
    metadata: dict[str, str] = {str(k): str(v) for k, v in (error.get("metadata") or {}).items()}
    if "outcome" in error:
        raise _confirm_error(str(error["outcome"]), metadata)
    raise _stored_error(error, metadata)


def _confirm_error(outcome: str, metadata: dict[str, str]) -> BoxofficeError:
    hold_id = metadata.get("hold_id", "")
    match outcome:
        case "HOLD_NOT_FOUND":
            return NotFound(f"hold {hold_id} does not exist", reason="HOLD_NOT_FOUND", metadata=metadata)
        case "HOLD_ALREADY_CONFIRMED":
            return FailedPrecondition(
                "the hold was already confirmed by another payment", reason="HOLD_ALREADY_CONFIRMED", metadata=metadata
            )
        case "HOLD_EXPIRED":
            return FailedPrecondition(
                f"the hold is {metadata.get('state', 'EXPIRED')}; it can no longer be confirmed",
                reason="HOLD_EXPIRED",
                metadata=metadata,
            )
        case "HOLD_SEATS_TAKEN":
            return FailedPrecondition(
                "the hold expired and its seats went to another customer", reason="HOLD_EXPIRED", metadata=metadata
            )
        case "TICKET_LIMIT_REACHED":
            return ticket_limit_error(
                limit=metadata.get("limit", ""),
                held=metadata.get("held", ""),
                bought=metadata.get("bought", ""),
                hold_id=hold_id,
            )
        case "AMOUNT_MISMATCH":
            return FailedPrecondition(
                f"paid {format_minor_text(metadata.get('paid_amount_minor'), metadata.get('paid_currency'))}, "
                "the hold costs "
                f"{format_minor_text(metadata.get('expected_amount_minor'), metadata.get('expected_currency'))}",
                reason="AMOUNT_MISMATCH",
                metadata=metadata,
            )
    return Internal(f"a stored confirmation has an unknown outcome {outcome!r}", reason="INTERNAL")


def _stored_error(error: dict[str, Any], metadata: dict[str, str]) -> BoxofficeError:
    """An answer stored with its canonical code name, reason and message
    (before outcomes had names): replayed as first given."""
    cls = error_class_for_code(str(error["code"]))
    return cls(str(error["message"]), reason=str(error["reason"]), metadata=metadata)
