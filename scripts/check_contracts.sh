#!/usr/bin/env bash
# The contract checks, offline: buf lint, buf format and buf breaking against
# the previous commit (HEAD~1).
#
# The contracts import google/api/annotations.proto (and through it
# google/api/http.proto) for their google.api.http annotations. Those files
# come from the installed googleapis-common-protos package, not from this
# repository: they are copied into third_party/googleapis, the second module
# of buf.yaml, which git, lint and breaking ignore. The previous commit's
# proto/ is checked out into a scratch workspace with the same buf.yaml and
# the same google protos, and buf breaking compares the working tree with it.
#
# Usage: scripts/check_contracts.sh   (PYTHON and BUF override the tools;
# by default the ones in .venv/bin, else the ones on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then py=$PYTHON; elif [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python; fi
if [ -n "${BUF:-}" ]; then buf=$BUF; elif [ -x .venv/bin/buf ]; then buf=.venv/bin/buf; else buf=buf; fi

vendor=third_party/googleapis
site=$("$py" -c 'import pathlib, google.api.annotations_pb2 as m; print(pathlib.Path(m.__file__).resolve().parents[2])')
for file in annotations.proto http.proto; do
  if [ ! -f "$site/google/api/$file" ]; then
    echo "google/api/$file is not in $site: install googleapis-common-protos" >&2
    exit 1
  fi
done
rm -rf "$vendor"
mkdir -p "$vendor/google/api"
cp "$site/google/api/annotations.proto" "$site/google/api/http.proto" "$vendor/google/api/"
printf '# Copied from the installed googleapis-common-protos by scripts/check_contracts.sh.\n*\n' >"$vendor/.gitignore"

"$buf" lint
echo "buf lint: ok"
"$buf" format proto --diff --exit-code
echo "buf format: ok"

if git rev-parse --verify --quiet HEAD~1 >/dev/null && git cat-file -e HEAD~1:proto 2>/dev/null; then
  against=$(mktemp -d)
  trap 'rm -rf "$against"' EXIT
  git archive HEAD~1 proto | tar -x -C "$against"
  cp buf.yaml "$against/"
  mkdir -p "$against/$(dirname "$vendor")"
  cp -R "$vendor" "$against/$vendor"
  "$buf" breaking --against "$against"
  echo "buf breaking: no breaking change against HEAD~1"
elif [[ ${CI:-} =~ ^(true|1)$ ]] && ! git rev-parse --verify --quiet HEAD~1 >/dev/null \
  && [[ $(git rev-parse --is-shallow-repository 2>/dev/null || echo true) != false ]]; then
  # CI compares every change with its parent: a clone that lacks it
  # (shallow, or no git history at all) cannot check the contracts.
  echo "buf breaking: no previous commit (HEAD~1) to compare with: a shallow clone? scripts/ops_deps.sh fetches the history" >&2
  exit 1
else
  echo "buf breaking: skipped (no earlier commit with proto/)"
fi
