"""The suite's own parallel plumbing (tests.parallel): each pytest-xdist
worker's Redis database is the base minus its index, never above the base
and never below 0, and a serial run keeps the base."""

from __future__ import annotations

import pytest

from tests.parallel import redis_db_url, worker_count, worker_index


@pytest.mark.parametrize(
    ("url", "worker", "expected"),
    [
        ("redis://127.0.0.1:6379/15", 0, "redis://127.0.0.1:6379/15"),
        ("redis://127.0.0.1:6379/15", 3, "redis://127.0.0.1:6379/12"),
        ("redis://127.0.0.1:6379", 1, "redis://127.0.0.1:6379/14"),
        ("redis://127.0.0.1:6379/", 0, "redis://127.0.0.1:6379/15"),
        ("redis://127.0.0.1:6379/13", 5, "redis://127.0.0.1:6379/8"),
        ("redis://:secret@redis:6380/4?socket_timeout=5", 4, "redis://:secret@redis:6380/0?socket_timeout=5"),
    ],
)
def test_each_worker_takes_the_base_database_minus_its_index(url: str, worker: int, expected: str) -> None:
    assert redis_db_url(url, worker) == expected


def test_a_worker_past_the_base_or_a_database_that_is_not_a_number_is_a_usage_error() -> None:
    with pytest.raises(pytest.UsageError, match=r"worker 5 would use Redis database -1.*-n may be at most 5"):
        redis_db_url("redis://127.0.0.1:6379/4", 5)
    with pytest.raises(pytest.UsageError, match="the path must be a database number"):
        redis_db_url("redis://127.0.0.1:6379/queue", 0)


def test_the_worker_is_read_from_xdist_s_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert (worker_index(), worker_count()) == (0, 1)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    assert (worker_index(), worker_count()) == (3, 4)
