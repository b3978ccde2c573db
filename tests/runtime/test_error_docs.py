"""docs/errors.md is generated from the ErrorReason enums and must not drift
from them: the suite fails until ``scripts/gen_error_docs.py`` is run again
after a change to a reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from boxoffice.errors import PUBLISHED_PACKAGES, published_reasons

ROOT = Path(__file__).resolve().parents[2]


def test_docs_errors_md_matches_the_protos() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/gen_error_docs.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_published_reason_is_documented() -> None:
    page = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    for package in PUBLISHED_PACKAGES:
        assert f"`{package}`" in page
        for reason in published_reasons(package):
            assert f"| `{reason}` (" in page, (package, reason)
