#!/usr/bin/env bash
# The suite's pytest run in two parts: every test not marked `apart` in
# parallel (pytest-xdist; each worker has its own Postgres database and Redis
# database, tests/parallel.py), then the `apart` tests (those that share a
# whole server: its connection slots, fixed ports, nodes they stop) alone,
# one after another. Then the count of tests both parts ran. Arguments go to
# both parts (tests to run, or options). Each worker starts with a run of
# consecutive tests (--dist worksteal), so a module's shared servers (its
# module-scoped fixtures) start on one or two workers rather than on all of
# them; a worker that runs out takes over half of a busy one's remainder.
#
#   BOXOFFICE_TEST_WORKERS  how many workers (default: 2 a core, at least 2)
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${BOXOFFICE_TEST_WORKERS:-$(( $(nproc) * 2 ))}

reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT

status=0
echo "== tests in parallel ($workers workers)"
python -m pytest -p xdist -n "$workers" --dist worksteal -m "not apart" --junitxml="$reports/parallel.xml" "$@" || status=$?
# 5: nothing was selected (the tests asked for are all of one part).
if [ "$status" = 5 ]; then status=0; fi
echo "== tests apart, one at a time"
apart=0
python -m pytest -m apart --junitxml="$reports/apart.xml" "$@" || apart=$?
if [ "$apart" = 5 ]; then apart=0; fi

python - "$reports/parallel.xml" "$reports/apart.xml" <<'PY'
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

counts = {}
for name in sys.argv[1:]:
    total = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    if Path(name).exists():
        for suite in ElementTree.parse(name).getroot().iter("testsuite"):
            for key in total:
                total[key] += int(suite.get(key, "0"))
    counts[Path(name).stem] = total
both = {key: sum(part[key] for part in counts.values()) for key in counts["parallel"]}
passed = both["tests"] - both["failures"] - both["errors"] - both["skipped"]
print(
    f"== {both['tests']} tests: {counts['parallel']['tests']} in parallel, {counts['apart']['tests']} apart;"
    f" {passed} passed, {both['failures']} failed, {both['errors']} errors, {both['skipped']} skipped"
)
PY
if [ "$status" != 0 ]; then exit "$status"; fi
exit "$apart"
