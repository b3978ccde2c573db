"""A local HTTP server that speaks the part of Stripe's API the Stripe
provider uses, shaped after Stripe's published OpenAPI description and the
fixtures its own mock serves (``stripe/openapi``: ``spec3.json``,
``fixtures3.json``): PaymentIntents (create and confirm, capture, search),
Refunds (create, retrieve), and the events and ``Stripe-Signature`` of
webhooks.

What it does as Stripe does:

- form-encoded bodies (``metadata[k]=v``, ``payment_method_types[0]=card``),
  ``Authorization: Bearer <secret key>`` (else 401);
- ``Idempotency-Key``: the first answer (errors included) is stored and
  replayed with ``Idempotent-Replayed: true``; the same key with other
  parameters is a 400 ``idempotency_error``; a request while the first with
  its key is still running is a 409 ``idempotency_key_in_use``;
- test payment methods: ``pm_card_visa`` authorises, ``pm_card_visa_chargeDeclined``
  is a 402 ``card_error`` (``card_declined``, ``generic_decline``) carrying
  the PaymentIntent, in ``requires_payment_method`` with its ``last_payment_error``;
- faults a test plans (:meth:`StripeFake.fail_next`): 429 or 5xx before a
  request is processed (nothing stored, as a proxy in front would answer),
  ``Stripe-Should-Retry`` when asked; an answer withheld after processing
  (:attr:`StripeFake.hold_answers`), as a connection lost on the way back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import re
import secrets
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

PM_VISA = "pm_card_visa"
PM_DECLINED = "pm_card_visa_chargeDeclined"
SECRET_KEY = "sk_test_boxoffice_fake_0123456789"


def _nested(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Stripe's form encoding back into a dict (lists as dicts of indexes)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        parts = re.findall(r"[^\[\]]+", key)
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def _error(status: int, kind: str, message: str, **extra: Any) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"type": kind, "message": message, **extra}}


@dataclass
class Fault:
    status: int
    should_retry: bool | None = None


@dataclass
class Recorded:
    """One request as it arrived."""

    method: str
    path: str
    idempotency_key: str
    status: int
    replayed: bool


@dataclass
class StripeFake:
    """The fake API's state; :func:`stripe_fake` serves it."""

    secret_key: str = SECRET_KEY
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Every Stripe event, oldest first.
    events: list[dict[str, Any]] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    # While set, a processed request's answer waits for it (the caller times out).
    hold_answers: asyncio.Event | None = None
    # While set, a create waits for it *inside* processing (its key is in use).
    processing_gate: asyncio.Event | None = None
    # Set when a request waits at the gate; when a 409 was answered.
    at_gate: asyncio.Event = field(default_factory=asyncio.Event)
    conflicted: asyncio.Event = field(default_factory=asyncio.Event)
    _keys: dict[str, tuple[bytes, int, dict[str, Any]]] = field(default_factory=dict)
    _in_flight: set[str] = field(default_factory=set)
    url: str = ""

    def fail_next(self, status: int, count: int = 1, *, should_retry: bool | None = None) -> None:
        self.faults.extend(Fault(status, should_retry) for _ in range(count))

    def of(self, method: str, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path == path]

    # -- what Stripe's dashboard and the card networks do

    def refund_in_dashboard(self, intent_id: str, amount: int) -> dict[str, Any]:
        """A refund made at Stripe by hand (no metadata of ours)."""
        intent = self.intents[intent_id]
        return self._refund(intent, amount, {})

    def capture_in_dashboard(self, intent_id: str) -> dict[str, Any]:
        """An authorised PaymentIntent captured at Stripe by hand."""
        status, body = self._capture(intent_id)
        assert status == 200, body
        return body

    def dispute(self, intent_id: str, reason: str = "fraudulent") -> dict[str, Any]:
        intent = self.intents[intent_id]
        dispute = {
            "id": "dp_" + secrets.token_hex(12),
            "object": "dispute",
            "amount": intent["amount_received"],
            "balance_transactions": [],
            "charge": intent["latest_charge"],
            "created": int(time.time()),
            "currency": intent["currency"],
            "is_charge_refundable": False,
            "livemode": False,
            "metadata": {},
            "payment_intent": intent["id"],
            "reason": reason,
            "status": "needs_response",
        }
        self._event("charge.dispute.created", dispute)
        return dispute

    def signed(self, event: dict[str, Any], secret: str, *, timestamp: int | None = None) -> tuple[str, bytes]:
        """A delivery of ``event``: its ``Stripe-Signature`` header and body."""
        body = json.dumps(event).encode()
        when = int(time.time()) if timestamp is None else timestamp
        mac = hmac.new(secret.encode(), f"{when}.".encode() + body, hashlib.sha256).hexdigest()
        return f"t={when},v1={mac}", body

    def events_of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    # -- the API

    async def handle(self, request: Request) -> Response:
        path = request.url.path
        key = request.headers.get("idempotency-key", "")
        if request.headers.get("authorization") != f"Bearer {self.secret_key}":
            status, body = _error(401, "invalid_request_error", "Invalid API Key provided")
            return self._answer(request, key, status, body)
        if self.faults:
            fault = self.faults.pop(0)
            status, body = _error(
                fault.status,
                "api_error" if fault.status >= 500 else "invalid_request_error",
                "An error occurred with our connection to Stripe." if fault.status >= 500 else "Too many requests",
                **({"code": "rate_limit"} if fault.status == 429 else {}),
            )
            headers = {} if fault.should_retry is None else {"Stripe-Should-Retry": str(fault.should_retry).lower()}
            return self._answer(request, key, status, body, headers)
        params = _nested(parse_qsl((await request.body()).decode(), keep_blank_values=True))
        if request.method == "GET":
            params = _nested(list(request.query_params.multi_items()))
        if request.method != "POST" or not key:
            status, body = await self._route(request.method, path, params)
            return self._answer(request, key, status, body)
        fingerprint = hashlib.sha256(json.dumps([path, params], sort_keys=True).encode()).digest()
        stored = self._keys.get(key)
        if stored is not None:
            if stored[0] != fingerprint:
                status, body = _error(
                    400,
                    "idempotency_error",
                    "Keys for idempotent requests can only be used with the same parameters they were first used with.",
                )
                return self._answer(request, key, status, body)
            return self._answer(request, key, stored[1], stored[2], {"Idempotent-Replayed": "true"}, replayed=True)
        if key in self._in_flight:
            status, body = _error(
                409,
                "invalid_request_error",
                "There is currently another in-progress request using this Idempotent Key.",
                code="idempotency_key_in_use",
            )
            self.conflicted.set()
            return self._answer(request, key, status, body)
        self._in_flight.add(key)
        try:
            if self.processing_gate is not None:
                self.at_gate.set()
                await self.processing_gate.wait()
            status, body = await self._route(request.method, path, params)
            self._keys[key] = (fingerprint, status, body)
        finally:
            self._in_flight.discard(key)
        if self.hold_answers is not None:
            await self.hold_answers.wait()
        return self._answer(request, key, status, body)

    def _answer(
        self,
        request: Request,
        key: str,
        status: int,
        body: dict[str, Any],
        headers: dict[str, str] | None = None,
        *,
        replayed: bool = False,
    ) -> Response:
        self.requests.append(Recorded(request.method, request.url.path, key, status, replayed))
        return JSONResponse(
            body, status_code=status, headers={"Request-Id": "req_" + secrets.token_hex(7), **(headers or {})}
        )

    async def _route(self, method: str, path: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if method == "POST" and path == "/v1/payment_intents":
            return self._create_intent(params)
        if method == "GET" and path == "/v1/payment_intents/search":
            return self._search(str(params.get("query", "")))
        capture = re.fullmatch(r"/v1/payment_intents/([^/]+)/capture", path)
        if method == "POST" and capture:
            return self._capture(capture.group(1))
        if method == "POST" and path == "/v1/refunds":
            return self._create_refund(params)
        refund = re.fullmatch(r"/v1/refunds/([^/]+)", path)
        if method == "GET" and refund and refund.group(1) in self.refunds:
            return 200, self.refunds[refund.group(1)]
        return _error(404, "invalid_request_error", f"Unrecognized request URL ({method}: {path}).")

    def _create_intent(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        try:
            amount = int(params["amount"])
        except (KeyError, ValueError):
            return _error(
                400,
                "invalid_request_error",
                "Missing required param: amount.",
                param="amount",
                code="parameter_missing",
            )
        if amount < 1:
            return _error(
                400, "invalid_request_error", "Amount must be at least 1.", param="amount", code="amount_too_small"
            )
        intent_id = "pi_" + secrets.token_hex(12)
        intent: dict[str, Any] = {
            "id": intent_id,
            "object": "payment_intent",
            "amount": amount,
            "amount_capturable": 0,
            "amount_received": 0,
            "capture_method": params.get("capture_method", "automatic_async"),
            "client_secret": f"{intent_id}_secret_{secrets.token_hex(8)}",
            "confirmation_method": "automatic",
            "created": int(time.time()),
            "currency": str(params.get("currency", "")),
            "last_payment_error": None,
            "latest_charge": None,
            "livemode": False,
            "metadata": dict(params.get("metadata") or {}),
            "payment_method": params.get("payment_method"),
            "payment_method_types": list((params.get("payment_method_types") or {"0": "card"}).values()),
            "status": "requires_confirmation",
        }
        self.intents[intent_id] = intent
        if params.get("confirm") != "true":
            return 200, intent
        if intent["payment_method"] == PM_DECLINED:
            error = {
                "type": "card_error",
                "code": "card_declined",
                "decline_code": "generic_decline",
                "message": "Your card was declined.",
                "charge": "ch_" + secrets.token_hex(12),
            }
            intent.update(status="requires_payment_method", last_payment_error=error, latest_charge=error["charge"])
            self._event("payment_intent.payment_failed", intent)
            return 402, {"error": {**error, "payment_intent": intent}}
        if intent["payment_method"] != PM_VISA:
            return _error(
                400, "invalid_request_error", "No such PaymentMethod", param="payment_method", code="resource_missing"
            )
        intent["latest_charge"] = "ch_" + secrets.token_hex(12)
        if intent["capture_method"] == "manual":
            intent.update(status="requires_capture", amount_capturable=amount)
            self._event("payment_intent.amount_capturable_updated", intent)
        else:
            intent.update(status="succeeded", amount_received=amount)
            self._event("payment_intent.succeeded", intent)
        return 200, intent

    def _capture(self, intent_id: str) -> tuple[int, dict[str, Any]]:
        intent = self.intents.get(intent_id)
        if intent is None:
            return _error(
                404, "invalid_request_error", f"No such payment_intent: '{intent_id}'", code="resource_missing"
            )
        if intent["status"] != "requires_capture":
            return _error(
                400,
                "invalid_request_error",
                f"This PaymentIntent could not be captured because it has a status of {intent['status']}.",
                code="payment_intent_unexpected_state",
                payment_intent=intent,
            )
        intent.update(status="succeeded", amount_received=intent["amount_capturable"], amount_capturable=0)
        self._event("payment_intent.succeeded", intent)
        return 200, intent

    def _search(self, query: str) -> tuple[int, dict[str, Any]]:
        match = re.fullmatch(r"metadata\['([^']+)'\]:'([^']*)'", query)
        if match is None:
            return _error(400, "invalid_request_error", "Invalid search query.", param="query")
        name, value = match.groups()
        found = [i for i in self.intents.values() if i["metadata"].get(name) == value]
        return 200, {
            "object": "search_result",
            "data": found,
            "has_more": False,
            "next_page": None,
            "url": "/v1/payment_intents/search",
        }

    def _create_refund(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        intent = self.intents.get(str(params.get("payment_intent", "")))
        if intent is None:
            return _error(
                400, "invalid_request_error", "No such payment_intent", param="payment_intent", code="resource_missing"
            )
        if intent["status"] != "succeeded":
            return _error(
                400, "invalid_request_error", "This PaymentIntent has not been captured.", code="charge_not_captured"
            )
        refunded = sum(r["amount"] for r in self.refunds.values() if r["payment_intent"] == intent["id"])
        left = intent["amount_received"] - refunded
        amount = int(params.get("amount", left))
        if amount > left:
            return _error(
                400,
                "invalid_request_error",
                f"Refund amount ({amount}) is greater than unrefunded amount on charge ({left})",
                param="amount",
                code="amount_too_large",
            )
        return 200, self._refund(intent, amount, dict(params.get("metadata") or {}))

    def _refund(self, intent: dict[str, Any], amount: int, metadata: dict[str, Any]) -> dict[str, Any]:
        refund = {
            "id": "re_" + secrets.token_hex(12),
            "object": "refund",
            "amount": amount,
            "balance_transaction": None,
            "charge": intent["latest_charge"],
            "created": int(time.time()),
            "currency": intent["currency"],
            "metadata": metadata,
            "payment_intent": intent["id"],
            "reason": None,
            "status": "succeeded",
        }
        self.refunds[refund["id"]] = refund
        self._event("refund.created", refund)
        charge = {
            "id": intent["latest_charge"],
            "object": "charge",
            "amount": intent["amount"],
            "amount_refunded": sum(r["amount"] for r in self.refunds.values() if r["payment_intent"] == intent["id"]),
            "currency": intent["currency"],
            "metadata": intent["metadata"],
            "payment_intent": intent["id"],
            "refunded": True,
        }
        self._event("charge.refunded", charge)
        return refund

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.append(
            {
                "id": "evt_" + secrets.token_hex(12),
                "object": "event",
                "api_version": "2025-01-27.acacia",
                "created": int(time.time()),
                "data": {"object": json.loads(json.dumps(obj))},
                "livemode": False,
                "pending_webhooks": 1,
                "request": {"id": None, "idempotency_key": None},
                "type": kind,
            }
        )


@contextlib.asynccontextmanager
async def stripe_fake() -> AsyncIterator[StripeFake]:
    """The fake served on a loopback port (``fake.url``)."""
    fake = StripeFake()
    app = Starlette(routes=[Route("/{path:path}", fake.handle, methods=["GET", "POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    fake.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield fake
    finally:
        if fake.hold_answers is not None:
            fake.hold_answers.set()
        server.should_exit = True
        await task
        sock.close()
