"""docs/capacity.md works from the README's benchmark figures: each figure
it uses, and the command that measured it, must be in the README's
"Benchmarks" section as it stands (a changed benchmark fails this until
the page is worked out again)."""

from __future__ import annotations

import re

from tests.k8s.support import ROOT

CAPACITY = ROOT / "docs/capacity.md"


def _benchmarks() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("\n## Benchmarks\n")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end != -1 else len(readme)]


def _figures() -> list[tuple[str, str, str]]:
    """(id, figure, command) of each row of the page's table of figures."""
    rows = re.findall(r"^\| (F\d+) \| (.+?) \| `([^`]+)`.*? \|$", CAPACITY.read_text(), flags=re.MULTILINE)
    return [(number, figure, command) for number, figure, command in rows]


def test_every_figure_and_its_command_are_the_readmes() -> None:
    benchmarks = _benchmarks()
    figures = _figures()
    assert len(figures) >= 10
    for number, figure, command in figures:
        assert f"`{command}`" in benchmarks, (number, command)
        for value in re.findall(r"~?\d+(?:,\d{3})*(?:\.\d+)?", figure):
            assert re.search(rf"(?<![\d.,]){re.escape(value)}(?![\d,]|\.\d)", benchmarks), (number, value)


def test_every_figure_is_used() -> None:
    text = CAPACITY.read_text()
    table_end = text.index("## Assumptions")
    used = set(re.findall(r"\bF\d+\b", text[table_end:]))
    assert used == {number for number, _, _ in _figures()}
