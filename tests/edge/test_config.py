"""The edge's upstream addresses are checked as gRPC targets when its
settings are read, so a mistyped address stops the edge at start instead of
failing every call to that service later."""

from __future__ import annotations

import pytest

from boxoffice.config import ConfigError, Env
from edge_svc import app as edge_app
from edge_svc.config import EdgeConfig
from tests.support import Stores, make_runtime

UPSTREAMS = {
    "BOXOFFICE_QUEUE_ADDR": "queue_addr",
    "BOXOFFICE_BOOKING_ADDR": "booking_addr",
    "BOXOFFICE_PAYMENT_ADDR": "payment_addr",
    "BOXOFFICE_CHECKIN_ADDR": "checkin_addr",
}

VALID = [
    "queue-svc:50051",
    "127.0.0.1:1",
    "queue-svc.boxoffice.svc.cluster.local:65535",
    "[::1]:50051",
    "[fd00::1]:50051",
    "dns:///queue-svc-headless:50051",
    "unix:/run/boxoffice/queue.sock",
    "unix:///run/boxoffice/queue.sock",
]

INVALID = [
    "notaurl",
    "host:",
    "host:0",
    "host:99999",
    "http://host:80",
    "dns://",
    "dns:///queue-svc-headless",  # the mesh dials a port: a name alone is refused
    "host port",
    "host port:50051",
    "[::1]",
    "[not-ipv6]:50051",
    "unix:",
]


def test_the_defaults_are_loopback_targets() -> None:
    config = EdgeConfig.from_env(Env({}))
    assert (config.queue_addr, config.booking_addr, config.payment_addr, config.checkin_addr) == (
        "127.0.0.1:50051",
        "127.0.0.1:50052",
        "127.0.0.1:50053",
        "127.0.0.1:50055",
    )


@pytest.mark.parametrize("name", UPSTREAMS)
@pytest.mark.parametrize("target", VALID)
def test_an_upstream_address_takes_a_grpc_target(name: str, target: str) -> None:
    config = EdgeConfig.from_env(Env({name: target}))
    assert getattr(config, UPSTREAMS[name]) == target


@pytest.mark.parametrize("name", UPSTREAMS)
@pytest.mark.parametrize("target", INVALID)
def test_an_upstream_address_that_is_not_a_grpc_target_is_refused(name: str, target: str) -> None:
    with pytest.raises(ConfigError) as err:
        EdgeConfig.from_env(Env({name: target}))
    message = str(err.value)
    # One line naming the setting and the value as it was given.
    assert "\n" not in message and message.startswith(f"{name}={target!r} is not a gRPC target"), message


def test_an_empty_address_is_not_a_target() -> None:
    # An empty setting reads as unset (the default), as every setting does;
    # an empty target itself is refused.
    assert EdgeConfig.from_env(Env({"BOXOFFICE_QUEUE_ADDR": ""})).queue_addr == "127.0.0.1:50051"
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_QUEUE_ADDR='' is not a gRPC target"):
        Env({}).grpc_target("BOXOFFICE_QUEUE_ADDR", "")


def test_the_edge_refuses_to_start_with_a_bad_queue_address(stores: Stores) -> None:
    rt = make_runtime(stores, environ={"BOXOFFICE_QUEUE_ADDR": "queue-svc-headless:99999"})
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_QUEUE_ADDR='queue-svc-headless:99999' is not a gRPC target"):
        edge_app.compose(rt)


def test_the_rate_limit_timeout_is_a_bounded_number_of_seconds() -> None:
    name = "BOXOFFICE_EDGE_RATE_LIMIT_TIMEOUT_SECONDS"
    assert EdgeConfig.from_env(Env({})).rate_limit_timeout_seconds == 0.25
    assert EdgeConfig.from_env(Env({name: "1.5"})).rate_limit_timeout_seconds == 1.5
    for value, message in (
        ("0", f"{name}=0.0 must be >= 0.01"),
        ("11", f"{name}=11.0 must be <= 10.0"),
        ("soon", f"{name}='soon' is not a number"),
    ):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
            EdgeConfig.from_env(Env({name: value}))
