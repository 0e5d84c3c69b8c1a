"""The SVG layout of a table: every state a box, every row on one edge per pair, in view."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from typing import Any

import pytest

from quiesce.check import TWO_PHASE_RM, TWO_PHASE_TM
from quiesce.explore import table_svg
from quiesce.fsm import Table, label
from quiesce.protocol.machines import TABLES

SVG = "{http://www.w3.org/2000/svg}"
TABLE_LIST = [*TABLES.values(), TWO_PHASE_RM, TWO_PHASE_TM]


def parse(table: Table[Any, Any]) -> ET.Element:
    return ET.fromstring(table_svg(table))


def boxes(root: ET.Element) -> dict[str, tuple[float, float, float, float]]:
    """`state -> (x, y, width, height)` of each node's outer box."""
    found = {}
    for node in root.iter(f"{SVG}g"):
        if node.get("class") == "node":
            rect = node.find(f"{SVG}rect")
            assert rect is not None
            found[node.get("data-state", "")] = tuple(
                float(rect.get(key, "nan")) for key in ("x", "y", "width", "height")
            )
    return found  # type: ignore[return-value]


@pytest.mark.parametrize("table", TABLE_LIST, ids=lambda t: t.name)
def test_every_state_is_a_box_and_every_row_is_on_exactly_one_edge(table: Table[Any, Any]) -> None:
    root = parse(table)
    assert set(boxes(root)) == {label(s) for s in table.states}
    edges = [g for g in root.iter(f"{SVG}g") if g.get("class") == "edge"]
    rows_per_edge = [[int(r) for r in g.get("data-rows", "").split()] for g in edges]
    pairs = {(label(s), label(row.target or s)) for row in table.rows for s in row.sources}
    assert len(edges) == len(pairs)  # merged: one edge per (source, target)
    # A row is drawn once per source state: on the edge from that source to its target.
    drawn = Counter(r for rows in rows_per_edge for r in rows)
    assert drawn == {index: len(row.sources) for index, row in enumerate(table.rows)}


@pytest.mark.parametrize("table", TABLE_LIST, ids=lambda t: t.name)
def test_the_view_box_holds_every_box_and_every_curve(table: Table[Any, Any]) -> None:
    root = parse(table)
    left, top, width, height = map(float, root.get("viewBox", "").split())
    for x, y, w, h in boxes(root).values():
        assert left <= x and x + w <= left + width and top <= y and y + h <= top + height
    for path in root.iter(f"{SVG}path"):
        numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", path.get("d", ""))]
        for x, y in zip(numbers[::2], numbers[1::2], strict=True):
            assert left <= x <= left + width and top <= y <= top + height


def test_states_are_laid_out_by_distance_from_the_initial_state() -> None:
    # rm: working -> prepared / committed / aborted, all one step away.
    found = boxes(parse(TWO_PHASE_RM))
    assert found["working"][0] < min(found[s][0] for s in ("prepared", "committed", "aborted"))
    assert len({found[s][0] for s in ("prepared", "committed", "aborted")}) == 1


def test_finals_have_a_double_border_and_the_initial_state_an_entry_arrow() -> None:
    root = parse(TWO_PHASE_TM)
    finals = {
        g.get("data-state")
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "node" and len(g.findall(f"{SVG}rect")) == 2
    }
    assert finals == {"committed", "aborted"}
    assert sum(1 for g in root.iter(f"{SVG}g") if g.get("class") == "entry") == 1


def test_edge_tooltips_carry_every_row_label_and_long_labels_are_cut() -> None:
    root = parse(TABLES["control_fence"])
    titles = [
        g.findtext(f"{SVG}title", "") for g in root.iter(f"{SVG}g") if g.get("class") == "edge"
    ]
    rows = TABLES["control_fence"].rows
    assert sum(len(t.splitlines()) for t in titles) == sum(len(row.sources) for row in rows)
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert any(t.endswith("…") for t in texts) and all(len(t) <= 26 for t in texts)


def test_the_layout_is_deterministic() -> None:
    assert table_svg(TABLES["checkpoint"]) == table_svg(TABLES["checkpoint"])


def test_edges_sharing_a_target_and_inputs_are_bundled_under_one_label() -> None:
    # The checkpoint's `failed` from ten states to `stopped` was ten labels (22 in all).
    root = parse(TABLES["checkpoint"])
    trunks = [g for g in root.iter(f"{SVG}g") if g.get("class") == "trunk"]
    titles = [g.findtext(f"{SVG}title", "") for g in trunks]
    assert "failed: from 10 states (hover each curve)" in titles
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert texts.count("failed") <= 9
    # A trunk carries the rows of every edge it bundles, so it lights up when one fires.
    edges = [g for g in root.iter(f"{SVG}g") if g.get("class") == "edge"]
    unlabelled = [g for g in edges if g.find(f"{SVG}text") is None]
    bundled_rows = sorted(r for g in unlabelled for r in g.get("data-rows", "").split())
    trunk_rows = sorted(r for g in trunks for r in g.get("data-rows", "").split())
    assert bundled_rows == trunk_rows and len(unlabelled) == 2 + 10 + 2 + 4
