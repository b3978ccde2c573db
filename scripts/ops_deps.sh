#!/usr/bin/env bash
# What the operations tests (tests/k8s/) need on a Debian machine, as root:
# promtool, from Debian's prometheus package, for `promtool check rules` and
# the alerts' `promtool test rules` cases. Installed only when missing;
# quiet, and fast when it is there.
set -euo pipefail

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "ops_deps: ${missing[*]} missing; run this as root to install" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # Only promtool is wanted (where systemd runs, the package also starts a
  # Prometheus server on :9090; nothing here uses it).
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
