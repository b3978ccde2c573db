"""The suite in parallel (pytest-xdist): which worker this process is, the
Redis database it owns, and the tests that must run apart.

Every worker is a test session of its own: it creates its own Postgres
database (as a serial run does) and, on a running Redis, flushes and uses its
own database, the base database (``BOXOFFICE_TEST_REDIS_URL``'s, 15 when it
names none) minus the worker's index, so that ``-n 4`` on base 15 uses 15, 14,
13 and 12 and never a database above the base. On the embedded stores every
worker starts its own servers.

Tests marked ``apart`` touch a whole server (its connection slots, fixed
ports, nodes they stop or kill): ``scripts/pytest_parallel.sh`` runs them
alone, serially, after the parallel part. Under ``-n`` they fail with that
reason instead of running beside other tests.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import pytest

APART = "apart"
# The database a Redis URL without one stands for.
DEFAULT_REDIS_DB = 15


def worker_index() -> int:
    """0 for a serial run and xdist's first worker (gw0), N for gwN."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else 0


def worker_count() -> int:
    """How many workers run the suite at once (1 for a serial run)."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def redis_db_url(url: str, worker: int) -> str:
    """``url`` (a standalone Redis, its base database in the path or none)
    at the database of ``worker``: the base minus the worker's index."""
    parts = urlsplit(url)
    named = parts.path.strip("/")
    if named and not named.isdigit():
        raise pytest.UsageError(f"BOXOFFICE_TEST_REDIS_URL={url!r}: the path must be a database number")
    base = int(named) if named else DEFAULT_REDIS_DB
    database = base - worker
    if database < 0:
        raise pytest.UsageError(
            f"BOXOFFICE_TEST_REDIS_URL={url!r}: worker {worker} would use Redis database {database}; "
            f"each worker takes the base database minus its index, so -n may be at most {base + 1}"
        )
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


def refuse_apart_in_parallel(item: pytest.Item) -> None:
    """An ``apart`` test on one of several workers fails with how to run it."""
    marker = item.get_closest_marker(APART)
    if marker is not None and worker_count() > 1:
        reason = marker.kwargs.get("reason", "")
        pytest.fail(
            f"{item.nodeid} runs apart ({reason}): run it without -n, after the parallel part "
            f"(scripts/pytest_parallel.sh does; by hand: -n N -m 'not {APART}', then -m {APART})",
            pytrace=False,
        )
