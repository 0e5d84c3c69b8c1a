"""Every `see:` a conformance failure prints leads somewhere: the page exists and, when it
names a section, a heading of that page has that anchor (GitHub's: lower case, spaces to
hyphens, punctuation dropped)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from quiesce.testing._rules import SECTIONS

ROOT = Path(__file__).resolve().parents[2]


def _anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("target", sorted(set(SECTIONS.values())))
def test_every_see_link_names_a_page_and_a_heading_of_it(target: str) -> None:
    page, _, anchor = target.partition("#")
    path = ROOT / page
    assert path.is_file(), f"see: {target}: no page {page}"
    if anchor:
        headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M)
        assert anchor in {_anchor(h) for h in headings}, f"see: {target}: no such heading"
