#!/usr/bin/env bash
# What the browser tests (tests/browser/) need on a Debian machine, as root:
# Debian's Chromium, Node.js with npm, and the npm dev dependencies of
# package.json (axe-core, Lighthouse). Each is installed only when missing
# (node_modules again when package-lock.json changed); quiet, and fast when
# everything is there. The Python side (Playwright's driver, zxing-cpp) comes
# with the dev extra of pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "browser_deps: ${missing[*]} missing; run this as root to install" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp=node_modules/.boxoffice-lock
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null
  echo "$want" >"$stamp"
fi
