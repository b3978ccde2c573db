#!/usr/bin/env bash
# What the operations tests (tests/k8s/) need on a Debian machine, as root:
# promtool, from Debian's prometheus package, for `promtool check rules` and
# the alerts' `promtool test rules` cases; Debian's pgbouncer, which runs
# the manifests' pgbouncer.ini. Installed only when missing; quiet, and
# fast when they are there.
set -euo pipefail

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v pgbouncer >/dev/null 2>&1 || [[ -x /usr/sbin/pgbouncer ]] || missing+=(pgbouncer)
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "ops_deps: ${missing[*]} missing; run this as root to install" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # Only the programs are wanted (where systemd runs, the packages also
  # start their servers, Prometheus on :9090 and PgBouncer on :6432;
  # nothing here uses them).
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
