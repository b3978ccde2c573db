#!/usr/bin/env bash
# What the operations tests (tests/k8s/) need on a Debian machine, as root:
# promtool, from Debian's prometheus package, for `promtool check rules` and
# the alerts' `promtool test rules` cases; Debian's pgbouncer, which runs
# the manifests' pgbouncer.ini. Installed only when missing; quiet, and
# fast when they are there. The history of a shallow clone, which the
# upgrade test (booking's old migrations, read from git) and the contract
# check (buf breaking against the previous commit) need. kubectl (its
# kustomize renders k8s/) has no Debian package recent enough: without it
# those tests fail under CI, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(git rev-parse --is-shallow-repository 2>/dev/null) == true ]]; then
  echo "ops_deps: a shallow clone; fetching its history" >&2
  git fetch --quiet --unshallow
fi
command -v kubectl >/dev/null 2>&1 || echo "ops_deps: kubectl is not on PATH (tests/k8s renders the manifests with it)" >&2

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
