#!/usr/bin/env bash
# Regenerates what is derived from proto/: gen/ (messages, gRPC stubs and .pyi
# type stubs), docs/errors.md (the reasons of the ErrorReason enums) and
# edge_svc/openapi.json (the edge's OpenAPI document, from its route table and
# the generated messages).
# Usage: scripts/gen_protos.sh [--check]   (--check fails when any would change)
# The code is generated into a scratch folder first; gen/ is replaced only
# when protoc succeeded, so a failing proto never leaves gen/ half written.
# google/api/annotations.proto and google/api/http.proto (imported for the
# google.api.http annotations) are read from the installed
# googleapis-common-protos package, whose google.api modules the generated
# code imports at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
out="$scratch/gen"
mkdir -p "$out"
log="$scratch/protoc.log"
googleapis=$("$py" -c 'import pathlib, google.api.annotations_pb2 as m; print(pathlib.Path(m.__file__).resolve().parents[2])')
if [ ! -f "$googleapis/google/api/annotations.proto" ]; then
  echo "google/api/annotations.proto is not in $googleapis: install googleapis-common-protos" >&2
  exit 1
fi
if ! "$py" -m grpc_tools.protoc -Igen=proto -I"$googleapis" \
  --python_out="$scratch" --grpc_python_out="$scratch" \
  --mypy_out="$scratch" --mypy_grpc_out="$scratch" \
  $(find proto -name '*.proto' | sort) >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
grep -v '^Writing mypy to' "$log" || true
find "$out/boxoffice" -type d -exec touch {}/__init__.py \;
touch "$out/__init__.py" "$out/py.typed"
if [ "${1:-}" = "--check" ]; then
  if ! diff -r -x __pycache__ "$out" gen; then
    echo "gen/ is out of date with proto/: run scripts/gen_protos.sh and commit" >&2
    exit 1
  fi
  echo "gen/ matches proto/"
else
  rm -rf gen/boxoffice
  cp -R "$out/boxoffice" gen/boxoffice
  cp "$out/__init__.py" "$out/py.typed" gen/
fi
"$py" scripts/gen_error_docs.py ${1:+"$1"}
"$py" scripts/gen_openapi.py ${1:+"$1"}
