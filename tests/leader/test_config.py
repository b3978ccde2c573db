"""Leader-election settings: defaults, validation, identity."""

from __future__ import annotations

import os
import socket

import pytest

from boxoffice.config import ConfigError, Env
from boxoffice.leader import LeaderConfig, LeaderTimings, advisory_keys, check_name, create_leadership
from tests.leader.support import runtime


def test_defaults_are_client_go_timings_on_postgres() -> None:
    config = LeaderConfig.from_env(Env({}))
    assert config.backend == "postgres"
    assert config.timings == LeaderTimings(lease_seconds=15.0, renew_deadline_seconds=10.0, retry_seconds=2.0)
    assert config.identity == f"{socket.gethostname()}-{os.getpid()}"
    # The server forgets a silent leader after its renew deadline and within the lease.
    assert 10.0 < config.timings.session_bound_seconds < 15.0


def test_identity_and_namespace_come_from_the_pod() -> None:
    config = LeaderConfig.from_env(Env({"POD_NAME": "admitter-7d9f-x2", "POD_NAMESPACE": "boxoffice"}))
    assert config.identity == "admitter-7d9f-x2"
    assert config.namespace == "boxoffice"


@pytest.mark.parametrize(
    ("environ", "mentions"),
    [
        ({"BOXOFFICE_LEADER_BACKEND": "etcd"}, "BOXOFFICE_LEADER_BACKEND"),
        ({"BOXOFFICE_LEADER_LEASE_SECONDS": "soon"}, "BOXOFFICE_LEADER_LEASE_SECONDS"),
        ({"BOXOFFICE_LEADER_LEASE_SECONDS": "10"}, "BOXOFFICE_LEADER_LEASE_SECONDS"),  # not above the renew deadline
        ({"BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS": "2.2"}, "BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS"),
        ({"BOXOFFICE_LEADER_RETRY_SECONDS": "0"}, "BOXOFFICE_LEADER_RETRY_SECONDS"),
        ({"BOXOFFICE_LEADER_RETRY_SECONDS": "nan"}, "BOXOFFICE_LEADER_RETRY_SECONDS"),
        ({"BOXOFFICE_LEADER_BACKEND": "kubernetes", "BOXOFFICE_LEADER_LEASE_SECONDS": "15.5"}, "whole number"),
        ({"BOXOFFICE_LEADER_KUBE_API_URL": "localhost:8001"}, "BOXOFFICE_LEADER_KUBE_API_URL"),
        ({"POD_NAME": "x" * 129}, "POD_NAME"),
    ],
)
def test_bad_values_are_config_errors(environ: dict[str, str], mentions: str) -> None:
    with pytest.raises(ConfigError, match=mentions):
        LeaderConfig.from_env(Env(environ))


def test_kubernetes_backend_outside_a_cluster_needs_an_api_url() -> None:
    rt = runtime("postgresql://unused", {"BOXOFFICE_LEADER_BACKEND": "kubernetes"})
    with pytest.raises(ConfigError, match="BOXOFFICE_LEADER_KUBE_API_URL"):
        create_leadership(rt, "admitter")


def test_role_names_become_object_names() -> None:
    assert check_name("admitter") == "admitter"
    for bad in ("", "Admitter", "ad_mitter", "-admitter", "a" * 41):
        with pytest.raises(ValueError, match="leader election name"):
            check_name(bad)


def test_advisory_keys_are_stable_and_distinct() -> None:
    assert advisory_keys("admitter") == advisory_keys("admitter")
    assert advisory_keys("admitter") != advisory_keys("sweeper")
    assert all(0 <= key < 2**31 for key in advisory_keys("admitter"))
