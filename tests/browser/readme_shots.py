"""Copies the README's screenshots (the waiting room, the seat map, the
tickets and the gate page, in English) from the browser tests' output into docs/screenshots/.

    python -m pytest tests/browser -q && python -m tests.browser.readme_shots
"""

from __future__ import annotations

import shutil
import sys

from tests.browser.harness import ROOT, SHOTS

README_SHOTS = {
    "2-waiting-en.png": "waiting-room.png",
    "3-seatmap-en.png": "seat-map.png",
    "5-tickets-en.png": "tickets.png",
    "6-gate-en.png": "gate.png",
}


def main() -> int:
    target = ROOT / "docs" / "screenshots"
    target.mkdir(parents=True, exist_ok=True)
    for source, name in README_SHOTS.items():
        path = SHOTS / source
        if not path.exists():
            print(f"{path} is missing: run the browser tests first", file=sys.stderr)
            return 1
        shutil.copyfile(path, target / name)
        print(f"docs/screenshots/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
