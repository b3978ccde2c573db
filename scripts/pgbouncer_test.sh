#!/usr/bin/env bash
# A part of the suite through PgBouncer in transaction mode, as production
# runs it: booking's holds and races, the payment flow, leader election and
# the admitters' hand-over, with DATABASE_URL through the pooler and
# DATABASE_DIRECT_URL straight to Postgres (tests/pgbouncer/plugin.py).
# Installs Debian's pgbouncer when missing (as root), starts one on loopback
# in front of the suite's Postgres (BOXOFFICE_TEST_DATABASE_URL, or an
# embedded one), runs the tests, and stops it. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}

pgbouncer=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
if [ ! -x "$pgbouncer" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "pgbouncer_test: pgbouncer is not installed (apt-get install pgbouncer)" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  pgbouncer=/usr/sbin/pgbouncer
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

direct=${BOXOFFICE_TEST_DATABASE_URL:-}
if [ -z "$direct" ]; then
  # No Postgres given: an embedded one for this run, stopped with it.
  mkfifo "$work/pg.url"
  "$python" -m tests.pgbouncer.embedded "$work/postgres" >"$work/pg.url" &
  pids+=($!)
  read -r direct <"$work/pg.url"
fi

# PgBouncer's address and its upstream, from the direct URL.
read -r host port user < <("$python" - "$direct" <<'PY'
import sys
from psycopg.conninfo import conninfo_to_dict
params = conninfo_to_dict(sys.argv[1])
print(params.get("host") or "127.0.0.1", params.get("port") or "5432", params.get("user") or "postgres")
PY
)
listen=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

mkdir "$work/pgbouncer"
conf=$work/pgbouncer
cat >"$conf/pgbouncer.ini" <<INI
[databases]
* = host=$host port=$port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $listen
unix_socket_dir =
auth_type = trust
auth_file = $conf/userlist.txt
admin_users = $user
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = $conf/pgbouncer.log
pidfile = $conf/pgbouncer.pid
INI
echo "\"$user\" \"\"" >"$conf/userlist.txt"
as_user=()
if [ "$(id -u)" = 0 ]; then
  # PgBouncer will not run as root: it runs as the owner of a Postgres
  # socket's folder (the embedded server's user), else as nobody.
  runner=nobody
  if [ "${host#/}" != "$host" ]; then
    runner=$(stat -c %U "$host")
  fi
  chmod 755 "$work"
  chown -R "$runner" "$conf"
  as_user=(-u "$runner")
fi
"$pgbouncer" "${as_user[@]}" "$conf/pgbouncer.ini" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  if "$python" -c "import socket, sys; socket.create_connection(('127.0.0.1', $listen), 0.2)" 2>/dev/null; then
    break
  fi
  sleep 0.1
done

pooled="postgresql://$user@127.0.0.1:$listen/postgres"
BOXOFFICE_TEST_DATABASE_URL=$pooled BOXOFFICE_TEST_DATABASE_DIRECT_URL=$direct \
  "$python" -m pytest -p tests.pgbouncer.plugin -p no:cacheprovider -q \
  tests/pgbouncer \
  tests/booking/test_races.py \
  tests/booking/test_lifecycle.py \
  tests/payment/test_payments.py \
  tests/leader/test_postgres.py::test_one_of_three_leads_and_cancelling_hands_over \
  tests/leader/test_postgres.py::test_cancelling_a_standby_stops_it_cleanly \
  tests/leader/test_postgres.py::test_work_that_fails_gives_the_role_up_and_raises \
  tests/queue/test_admitter.py::test_two_admitter_processes_hand_over_with_postgres_leadership \
  "$@"
