"""The suite's settings behind a transaction-mode PgBouncer, as production
runs them (``scripts/pgbouncer_test.sh`` loads this with ``-p``).

``BOXOFFICE_TEST_DATABASE_URL`` names the PgBouncer and
``BOXOFFICE_TEST_DATABASE_DIRECT_URL`` the Postgres behind it. Every
Runtime a test builds then gets what a production process behind PgBouncer
is given: ``DATABASE_URL`` through the pooler, ``DATABASE_DIRECT_URL``
straight to Postgres (the leader election's session lock), and prepared
statements off (PgBouncer before 1.21 cannot keep them); the suite's schema
is migrated over the direct URL, as ``boxoffice migrate`` does with
``DATABASE_DIRECT_URL``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from boxoffice import db
from boxoffice.config import Env
from boxoffice.runtime import Runtime


def direct_url(url: str) -> str:
    """``url`` (through the pooler) to the same database straight at Postgres:
    the direct URL's address and query, ``url``'s database."""
    direct = urlsplit(os.environ["BOXOFFICE_TEST_DATABASE_DIRECT_URL"])
    pooled = urlsplit(url)
    return urlunsplit((direct.scheme, direct.netloc, pooled.path, direct.query, ""))


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("BOXOFFICE_TEST_DATABASE_DIRECT_URL"):
        raise pytest.UsageError("tests.pgbouncer.plugin needs BOXOFFICE_TEST_DATABASE_DIRECT_URL")
    from_env = Runtime.from_env.__func__  # type: ignore[attr-defined]
    migrate = db.migrate

    def pooled_from_env(cls: type[Runtime], env: Env, *, database_url: str, **kwargs: Any) -> Runtime:
        pooled = env.overlay(
            {
                "DATABASE_URL": database_url,
                "DATABASE_DIRECT_URL": direct_url(database_url),
                "BOXOFFICE_DB_PREPARED_STATEMENTS": "false",
            }
        )
        runtime: Runtime = from_env(cls, pooled, database_url=database_url, **kwargs)
        return runtime

    async def direct_migrate(url: str, migrations: Sequence[db.Migration]) -> list[str]:
        return await migrate(direct_url(url), migrations)

    Runtime.from_env = classmethod(pooled_from_env)  # type: ignore[method-assign,assignment,arg-type]
    db.migrate = direct_migrate
