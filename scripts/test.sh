#!/usr/bin/env bash
# The whole test suite, from nothing: a virtualenv with the pinned tools, the
# contract checks (buf lint, format, breaking; gen/ drift), ruff, mypy --strict,
# the browser tests' Chromium and npm tools when missing, then pytest against
# real Postgres and Redis (embedded unless
# BOXOFFICE_TEST_DATABASE_URL / BOXOFFICE_TEST_REDIS_URL are set).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
pip_log=$(mktemp)
if ! { .venv/bin/python -m pip install --quiet --upgrade pip && .venv/bin/python -m pip install --quiet -e '.[dev]'; } >"$pip_log" 2>&1; then
  cat "$pip_log" >&2
  exit 1
fi
rm -f "$pip_log"
export PATH="$PWD/.venv/bin:$PATH"
# The browser tests' Chromium and npm tools, installed only when missing.
scripts/browser_deps.sh
scripts/ops_deps.sh  # promtool and pgbouncer, for tests/k8s/

echo "== contracts"
scripts/check_contracts.sh
PYTHON=.venv/bin/python scripts/gen_protos.sh --check

echo "== lint and types"
ruff check .
ruff format --check .
mypy

echo "== tests"
scripts/pytest_parallel.sh "$@"  # in parallel, then the tests marked apart alone
scripts/pgbouncer_test.sh  # booking, payment and leader election through a transaction-mode PgBouncer
scripts/redis_cluster_test.sh  # the queue and stream tests on a local Redis Cluster (3 primaries, 3 replicas), with failovers
scripts/fresh_install_test.sh  # the README's install in a new virtualenv, and every command the README tells a user to run
