"""The client's address is the peer's unless the peer is one of
BOXOFFICE_EDGE_TRUSTED_PROXIES: an X-Forwarded-For from any other peer
(loopback included) is ignored, so a made-up header dodges no per-address
limit and names no queue client id."""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import AsyncIterator

import pytest

from tests.edge.fans import expect
from tests.edge.harness import EdgeStack, edge_stack, loopback_address
from tests.support import Stores

# Three requests at once per address, then one per 100 s.
_STRICT: dict[str, object] = {
    "ip_rate_per_second": 0.01,
    "ip_burst": 3,
    "rate_limit_timeout_seconds": 10.0,
}


@pytest.fixture(scope="module")
async def untrusting(stores: Stores) -> AsyncIterator[EdgeStack]:
    """An edge that trusts no proxy, reached from loopback."""
    async with edge_stack(stores, settings={**_STRICT, "trusted_proxies": ()}, prefix="edge-xff") as stack:
        yield stack


async def test_a_forwarded_address_from_an_untrusted_peer_is_ignored(untrusting: EdgeStack) -> None:
    async with untrusting.client_from(loopback_address()) as client:
        # The peer's budget spent with a new made-up address each time.
        for n in range(3):
            forged = {"X-Forwarded-For": f"198.51.100.{n + 1}"}
            reply = await client.post("/v1/session", json={"name": f"xff-{n}"}, headers=forged)
            assert reply.status_code == 200, reply.text
        client.cookies.clear()
        reply = await client.post("/v1/session", json={"name": "xff-4"}, headers={"X-Forwarded-For": "198.51.100.99"})
        found = expect(reply, 429, "RESOURCE_EXHAUSTED", "TOO_MANY_REQUESTS")
        assert found.metadata["scope"] == "ip"


@pytest.fixture(scope="module")
async def behind_a_proxy(stores: Stores) -> AsyncIterator[EdgeStack]:
    """An edge whose load balancer is loopback."""
    settings = {**_STRICT, "trusted_proxies": (ipaddress.ip_network("127.0.0.1/32"),)}
    async with edge_stack(stores, settings=settings, prefix="edge-xff-trusted") as stack:
        yield stack


async def test_a_trusted_proxy_names_the_client_by_its_last_untrusted_hop(behind_a_proxy: EdgeStack) -> None:
    """Through a trusted proxy, the client is the last hop the proxy saw,
    not the first (which the client wrote itself)."""
    address = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.7"
    async with behind_a_proxy.client() as client:
        for n in range(3):
            # A different made-up first hop each time; the proxy's hop is the same.
            hops = {"X-Forwarded-For": f"198.51.100.{n + 1}, {address}"}
            assert (await client.post("/v1/session", json={"name": "hop"}, headers=hops)).status_code == 200
        client.cookies.clear()
        reply = await client.post(
            "/v1/session", json={"name": "hop"}, headers={"X-Forwarded-For": f"198.51.100.50, {address}"}
        )
        assert expect(reply, 429, "RESOURCE_EXHAUSTED", "TOO_MANY_REQUESTS").metadata["scope"] == "ip"
        # Another client behind the same proxy has its own budget.
        other = {"X-Forwarded-For": f"{address.rsplit('.', 1)[0]}.8"}
        assert (await client.post("/v1/session", json={"name": "hop"}, headers=other)).status_code == 200
