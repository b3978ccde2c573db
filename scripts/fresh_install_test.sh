#!/usr/bin/env bash
# The README's install, as a new user makes it: a virtualenv made from
# nothing, outside the repository, with exactly the README's run command
# (pip install -e '.[embedded]', no dev extra), then every command the
# README tells a user to run (scripts/fresh_install_check.py): every
# --help, simulate --model, and up with verify-draw and report against it.
# A run-time import that only the dev extra provides fails here. pip's cache
# makes every run after the first quick. PYTHON picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-$(command -v python3.11 || command -v python3)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
# No settings of the suite's virtualenv leak into the new one.
env -u VIRTUAL_ENV -u PYTHONPATH -u PIP_REQUIRE_VIRTUALENV "$python" -m venv "$work/venv"
if ! env -u VIRTUAL_ENV -u PYTHONPATH "$work/venv/bin/pip" install --quiet -e '.[embedded]' >"$work/pip.log" 2>&1; then
  cat "$work/pip.log" >&2
  exit 1
fi
echo "fresh install: venv and pip install -e '.[embedded]' ($(( $(date +%s) - start )) s)"
env -u VIRTUAL_ENV -u PYTHONPATH "$work/venv/bin/python" scripts/fresh_install_check.py "$work/venv" "$work"
echo "fresh install: passed in $(( $(date +%s) - start )) s"
