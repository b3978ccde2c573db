"""The edge, as the tests play it: a client channel with the edge's
certificate that asserts the fan a call is for in ``x-boxoffice-customer``,
the way the edge does after it has authenticated the fan.

The fan is the one the request names (its ``customer_id``), else the
customer of its access token, else the customer of the payment it names (as
learned from earlier answers on the channel), else the client's default fan.
A call that already carries the metadata is sent as it is (attack tests
assert another fan on purpose), and :data:`NO_FAN` sends none.
"""

from __future__ import annotations

import base64
import contextlib
import json
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from boxoffice import access
from boxoffice.caller import CUSTOMER_METADATA_KEY
from tests.support import MeshClient, Stores, channel_credentials

# A default fan meaning "assert nobody".
NO_FAN = ""


def as_fan(customer_id: str) -> tuple[tuple[str, str]]:
    """The metadata with which the edge asserts ``customer_id``."""
    return ((CUSTOMER_METADATA_KEY, urllib.parse.quote(customer_id, safe="")),)


def _token_customer(token: str) -> str | None:
    parts = token.split(".")
    if len(parts) != 4:
        return None
    try:
        body = json.loads(base64.urlsafe_b64decode(parts[2] + "=" * (-len(parts[2]) % 4)))
        return str(body["c"])
    except (ValueError, KeyError, TypeError):
        return None


class _Fans:
    """Which fan a request is for, and what the answers taught."""

    def __init__(self, default: str) -> None:
        self.default = default
        self.payments: dict[str, str] = {}

    def of(self, request: Any) -> str:
        named = getattr(request, "customer_id", "")
        if isinstance(named, str) and named:
            return named
        token = getattr(request, "access_token", "")
        if isinstance(token, str) and token and (customer := _token_customer(token)) is not None:
            return customer
        payment_id = getattr(request, "payment_id", "")
        if isinstance(payment_id, str) and payment_id in self.payments:
            return self.payments[payment_id]
        return self.default

    def learn(self, response: Any) -> None:
        payment = getattr(response, "payment", None)
        payment_id = getattr(payment, "payment_id", "")
        customer = getattr(payment, "customer_id", "")
        if isinstance(payment_id, str) and payment_id and isinstance(customer, str) and customer:
            self.payments[payment_id] = customer


def _with_fan(details: grpc.aio.ClientCallDetails, fan: str) -> grpc.aio.ClientCallDetails:
    metadata = list(details.metadata or ())
    if not fan or any(key == CUSTOMER_METADATA_KEY for key, _ in metadata):
        return details
    metadata.extend(as_fan(fan))
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, grpc.aio.Metadata(*metadata), details.credentials, details.wait_for_ready
    )


class _UnaryAsserting(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, fans: _Fans) -> None:
        self._fans = fans

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        call = await continuation(_with_fan(client_call_details, self._fans.of(request)), request)
        with contextlib.suppress(grpc.RpcError, AttributeError):
            self._fans.learn(await call)
        return call


class _StreamAsserting(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, fans: _Fans) -> None:
        self._fans = fans

    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(_with_fan(client_call_details, self._fans.of(request)), request)


def edge_channel(stores: Stores, address: str, *, fan: str = NO_FAN) -> grpc.aio.Channel:
    """A channel as the edge, asserting each call's fan (``fan`` when the
    request names none)."""
    fans = _Fans(fan)
    files = stores.pki.files(access.EDGE)
    return grpc.aio.secure_channel(
        address,
        channel_credentials(files, files.ca),
        interceptors=[_UnaryAsserting(fans), _StreamAsserting(fans)],
    )


class EdgeMeshClient(MeshClient):
    """:class:`tests.support.MeshClient` whose edge channel asserts fans."""

    def __init__(self, stores: Stores, address: str, *, fan: str = NO_FAN) -> None:
        super().__init__(stores, address)
        self._fan = fan

    def channel(self, role: str) -> grpc.aio.Channel:
        if role == access.EDGE and role not in self._channels:
            self._channels[role] = edge_channel(self._stores, self.address, fan=self._fan)
        return super().channel(role)


@contextlib.asynccontextmanager
async def edge_mesh_client(stores: Stores, address: str, *, fan: str = NO_FAN) -> AsyncIterator[EdgeMeshClient]:
    client = EdgeMeshClient(stores, address, fan=fan)
    try:
        yield client
    finally:
        await client.close()
