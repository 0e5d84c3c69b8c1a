"""docs/validate.md's design sizes are what `quiesce validate` exhausts: each row of its
"fault budget | design states | fence moves" table is produced here, and every "fault
budget N (X states)" the page quotes agrees with the table. Budget 3 (about 10 s of CPU) is
`slow` (`uv run pytest -m slow tests/models/refinement/test_validate_doc.py`); the timings
are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from quiesce.models import design_size
from quiesce.models.refinement._refinement import DesignSteps

PAGE = Path(__file__).resolve().parents[3] / "docs" / "validate.md"


def _table() -> dict[int, tuple[int, int]]:
    """`{fault budget: (design states, fence moves)}` as the page's table quotes them."""
    rows = re.findall(r"^\| (\d) \| ([\d,]+) \| (\d+) \| [^|]+\|$", PAGE.read_text(), re.M)
    assert rows, "docs/validate.md no longer has its fault budget table"
    return {int(b): (int(s.replace(",", "")), int(m)) for b, s, m in rows}


@pytest.mark.parametrize(
    "faults", [1, 2, pytest.param(3, marks=pytest.mark.slow)], ids=lambda f: f"budget {f}"
)
def test_the_table_quotes_the_design_validate_exhausts(faults: int) -> None:
    design = DesignSteps(design_size(faults))
    assert _table()[faults] == (design.design_states, len(design.fence_moves)), (
        f"docs/validate.md's budget {faults} row is not what the design gives: move the page"
    )


def test_the_examples_quote_the_table() -> None:
    table = _table()
    quoted = re.findall(r"fault budget (\d) \(([\d,]+) states\)", PAGE.read_text())
    assert quoted, "docs/validate.md no longer quotes a budget in its examples"
    for budget, states in quoted:
        assert table[int(budget)][0] == int(states.replace(",", "")), (budget, states)
