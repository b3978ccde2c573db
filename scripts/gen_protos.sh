#!/usr/bin/env bash
# Regenerates what is derived from proto/: gen/ (messages, gRPC stubs and .pyi
# type stubs) and docs/errors.md (the reasons of the ErrorReason enums).
# Usage: scripts/gen_protos.sh [--check]   (--check fails when either would change)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python}
out=gen
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)/gen
fi
rm -rf "$out/boxoffice"
mkdir -p "$out"
target=$(dirname "$out")
log=$(mktemp)
if ! "$py" -m grpc_tools.protoc -Igen=proto \
  --python_out="$target" --grpc_python_out="$target" \
  --mypy_out="$target" --mypy_grpc_out="$target" \
  $(find proto -name '*.proto' | sort) >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
grep -v '^Writing mypy to' "$log" || true
rm -f "$log"
find "$out/boxoffice" -type d -exec touch {}/__init__.py \;
touch "$out/__init__.py" "$out/py.typed"
if [ "${1:-}" = "--check" ]; then
  if ! diff -r -x __pycache__ "$out" gen; then
    echo "gen/ is out of date with proto/: run scripts/gen_protos.sh and commit" >&2
    exit 1
  fi
  echo "gen/ matches proto/"
fi
"$py" scripts/gen_error_docs.py ${1:+"$1"}
