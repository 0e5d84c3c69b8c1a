"""A table's state diagram as inline SVG, laid out here: no Graphviz, no JS library.

What lives here: a small layered layout. States are put in columns by their breadth-first
distance from the initial state (states the rows never reach get a last column of their
own), ordered inside a column by the mean position of their neighbours in the previous
column (one sweep each way), and drawn as rounded boxes. Every row of the table that moves
`source -> target` is merged into one edge per pair, so a table with 186 rows over 24 pairs
draws 24 edges: forward edges are curves from the right of the source to the left of the
target, edges within a column bulge to its right, backward edges arc over the top, and
self-loops are small loops on top of their box.

Edges from several states into one target under the same inputs (the checkpoint's nine
`failed` moves to `stopped`) are bundled: each source's curve runs, unlabelled, to a hub
just below the target, and one short trunk from the hub carries the arrow and the label
once. Without it a diagram with a common failure input is a tangle of identical labels.

The SVG carries what the page highlights: a node is `<g class="node" data-state=LABEL>`,
an edge is `<g class="edge" data-rows="0 3">` (the indices of its rows in `table.rows`),
and the full row labels are the edge's `<title>` (its tooltip); a bundle's trunk is
`<g class="trunk" data-rows=...>` with the rows of all its edges. Output is deterministic.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from html import escape
from typing import Any

from quiesce.fsm import Table, label

__all__ = ["table_svg"]

_FONT_PX = 12
_CHAR_PX = 7.0  # mean advance of a 12 px sans-serif character, to size the boxes
_NODE_H = 26
_NODE_PAD = 16
_ROW_GAP = 34  # vertical space between two boxes of a column
_COL_GAP = 120  # horizontal space between columns, where the edge labels go
_MARGIN = 30  # room around the drawing
_EDGE_CHAR_PX = 6.0  # the same for the 10 px edge labels (page.html sets their size)
_LABEL_CHARS = 26  # an edge label longer than this is cut; its tooltip has it all
_HUB_DROP = 20  # how far below its target a bundle's hub sits (inside the row gap)


@dataclass(frozen=True, slots=True)
class _Edge:
    source: Enum
    target: Enum
    rows: tuple[int, ...]
    labels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Box:
    x: float
    y: float
    width: float

    @property
    def middle(self) -> float:
        return self.y + _NODE_H / 2


@dataclass(frozen=True, slots=True)
class _Bundle:
    """Edges from several sources into `target` under the same caption, drawn as one."""

    target: Enum
    caption: str
    edges: tuple[_Edge, ...]


def table_svg(table: Table[Any, Any]) -> str:
    """The state diagram of `table` as an `<svg>` element (see the module doc)."""
    edges = _edges(table)
    boxes = _place(_order(_columns(table, edges), edges))
    bundles = _bundles(edges)
    hubs = _hubs(bundles, boxes)
    hub_of = {edge: hubs[bundle] for bundle in bundles for edge in bundle.edges}
    curves = [
        (edge, _to_hub(boxes[edge.source], hub_of[edge]))
        if edge in hub_of
        else (edge, _curve(boxes[edge.source], boxes[edge.target]))
        for edge in edges
    ]
    captions = [None if edge in hub_of else _caption(edge, points) for edge, points in curves]
    trunks = [_trunk(bundle, boxes[bundle.target], hubs[bundle]) for bundle in bundles]
    # A cubic curve stays inside the hull of its control points: they bound the drawing,
    # with the boxes (and the entry dot left of the initial one) and the captions.
    xs = [x for box in boxes.values() for x in (box.x - 20, box.x + box.width)]
    ys = [y for box in boxes.values() for y in (box.y, box.y + _NODE_H)]
    xs += [x for _, points in curves for x, _ in points]
    ys += [y for _, points in curves for _, y in points]
    shown = [caption for caption in captions if caption is not None]
    xs += [x + side * len(text) * _EDGE_CHAR_PX / 2 for x, _, text in shown for side in (-1, 1)]
    ys += [y - _FONT_PX for _, y, _ in shown]
    xs += [x + len(text) * _EDGE_CHAR_PX for x, _, text in (t.caption for t in trunks)]
    left, top = min(xs) - _MARGIN / 2, min(ys) - _MARGIN
    width, height = max(xs) - left + _MARGIN / 2, max(ys) - top + _MARGIN / 2
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="diagram" '
        f'data-table="{escape(table.name)}" '
        f'viewBox="{left:.0f} {top:.0f} {width:.0f} {height:.0f}" '
        f'width="{width:.0f}" height="{height:.0f}" font-size="{_FONT_PX}">',
        f"<title>{escape(table.name)}</title>",
    ]
    parts.extend(
        _draw_edge(edge, points, text)
        for (edge, points), text in zip(curves, captions, strict=True)
    )
    parts.extend(_draw_trunk(trunk) for trunk in trunks)
    start = boxes[table.initial]
    parts.append(
        f'<g class="entry"><circle cx="{start.x - 14:.1f}" cy="{start.middle:.1f}" r="4"/>'
        f'<line x1="{start.x - 10:.1f}" y1="{start.middle:.1f}" x2="{start.x:.1f}" '
        f'y2="{start.middle:.1f}"/></g>'
    )
    parts.extend(_draw_node(state, boxes[state], state in table.finals) for state in boxes)
    parts.append("</svg>")
    return "\n".join(parts)


def _edges(table: Table[Any, Any]) -> list[_Edge]:
    """One edge per `(source, target)` pair, in row order, with the rows that make it."""
    merged: dict[tuple[Enum, Enum], tuple[list[int], list[str]]] = {}
    for index, row in enumerate(table.rows):
        for source in row.sources:
            rows, labels = merged.setdefault((source, row.target or source), ([], []))
            rows.append(index)
            labels.append(row.label())
    return [
        _Edge(source, target, tuple(rows), tuple(labels))
        for (source, target), (rows, labels) in merged.items()
    ]


def _bundles(edges: list[_Edge]) -> list[_Bundle]:
    """The edges (no self-loops) that share a target and a caption, two or more."""
    by_key: dict[tuple[Enum, str], list[_Edge]] = {}
    for edge in edges:
        if edge.source is not edge.target:
            by_key.setdefault((edge.target, _inputs(edge)), []).append(edge)
    return [
        _Bundle(target, caption, tuple(group))
        for (target, caption), group in by_key.items()
        if len(group) >= 2
    ]


def _columns(table: Table[Any, Any], edges: list[_Edge]) -> list[list[Enum]]:
    """States by breadth-first distance from the initial state; unreached ones last."""
    following: dict[Enum, list[Enum]] = {}
    for edge in edges:
        following.setdefault(edge.source, []).append(edge.target)
    distance = {table.initial: 0}
    queue = deque([table.initial])
    while queue:
        here = queue.popleft()
        for there in following.get(here, ()):
            if there not in distance:
                distance[there] = distance[here] + 1
                queue.append(there)
    columns: list[list[Enum]] = [[] for _ in range(max(distance.values()) + 1)]
    unreached = []
    for state in table.states:  # enum order: the starting order inside a column
        if state in distance:
            columns[distance[state]].append(state)
        else:
            unreached.append(state)
    return [*columns, unreached] if unreached else columns


def _order(columns: list[list[Enum]], edges: list[_Edge]) -> list[list[Enum]]:
    """Reorder each column by the mean rank of its neighbours in the column just ordered
    (a sweep left to right, then one right to left), to uncross the edges a little."""
    neighbours: dict[Enum, set[Enum]] = {}
    for edge in edges:
        if edge.source is not edge.target:
            neighbours.setdefault(edge.source, set()).add(edge.target)
            neighbours.setdefault(edge.target, set()).add(edge.source)
    ordered = [list(column) for column in columns]
    sweeps = [range(1, len(ordered)), range(len(ordered) - 2, -1, -1)]
    for sweep, step in zip(sweeps, (-1, 1), strict=True):
        for at in sweep:
            rank = {state: i for i, state in enumerate(ordered[at + step])}

            def centre(state: Enum, rank: dict[Enum, int] = rank) -> float:
                near = [rank[n] for n in neighbours.get(state, ()) if n in rank]
                return sum(near) / len(near) if near else float("inf")

            # `sorted` is stable: states without neighbours there keep their order, last.
            ordered[at] = sorted(ordered[at], key=centre)
    return ordered


def _place(columns: list[list[Enum]]) -> dict[Enum, _Box]:
    """Boxes left to right, each column centred on the tallest one."""
    tallest = max(len(column) for column in columns)
    boxes: dict[Enum, _Box] = {}
    x = float(_MARGIN)
    for column in columns:
        width = max(_text_width(label(state)) for state in column) if column else 0.0
        top = _MARGIN + (tallest - len(column)) * (_NODE_H + _ROW_GAP) / 2
        for i, state in enumerate(column):
            boxes[state] = _Box(x, top + i * (_NODE_H + _ROW_GAP), width)
        x += width + _COL_GAP
    return boxes


def _text_width(text: str) -> float:
    return len(text) * _CHAR_PX + _NODE_PAD


def _draw_node(state: Enum, box: _Box, final: bool) -> str:
    name = escape(label(state))
    inner = (
        f'<rect class="final" x="{box.x + 3:.1f}" y="{box.y + 3:.1f}" width="{box.width - 6:.1f}"'
        f' height="{_NODE_H - 6}" rx="4"/>'
        if final
        else ""
    )
    return (
        f'<g class="node" data-state="{name}"><rect x="{box.x:.1f}" y="{box.y:.1f}" '
        f'width="{box.width:.1f}" height="{_NODE_H}" rx="6"/>{inner}'
        f'<text x="{box.x + box.width / 2:.1f}" y="{box.middle + 4:.1f}" '
        f'text-anchor="middle">{name}</text></g>'
    )


_Curve = tuple[tuple[float, float], tuple[float, float], tuple[float, float], tuple[float, float]]


def _curve(a: _Box, b: _Box) -> _Curve:
    """The control points of the edge from box `a` to box `b`."""
    if a == b:  # a self-loop on top of the box
        left, right = a.x + a.width / 2 - 10, a.x + a.width / 2 + 10
        return (left, a.y), (left - 14, a.y - 28), (right + 14, a.y - 28), (right, a.y)
    if b.x > a.x:  # forward: right side to left side
        x0, x1 = a.x + a.width, b.x
        bend = (x1 - x0) / 2
        return (x0, a.middle), (x0 + bend, a.middle), (x1 - bend, b.middle), (x1, b.middle)
    if b.x == a.x:  # within a column: bulging right, further for the upward ones
        x = a.x + a.width
        bulge = (30 if b.y > a.y else 55) + abs(b.y - a.y) / 5
        return (x, a.middle), (x + bulge, a.middle), (x + bulge, b.middle), (x, b.middle)
    # Backward: an arc over the top, higher the further it goes.
    x0, x1 = a.x + a.width / 2, b.x + b.width / 2
    top = min(a.y, b.y) - 30 - (x0 - x1) / 6
    return (x0, a.y), (x0, top), (x1, top), (x1, b.y)


def _hubs(bundles: list[_Bundle], boxes: dict[Enum, _Box]) -> dict[_Bundle, tuple[float, float]]:
    """Where each bundle meets: below its target (self-loops sit on top), the bundles of
    one target spread along its width."""
    into: dict[Enum, list[_Bundle]] = {}
    for bundle in bundles:
        into.setdefault(bundle.target, []).append(bundle)
    hubs = {}
    for target, sharing in into.items():
        box = boxes[target]
        for k, bundle in enumerate(sharing):
            x = box.x + box.width * (k + 1) / (len(sharing) + 1)
            # Each a little lower than the last, so side by side labels do not overlap.
            hubs[bundle] = (x, box.y + _NODE_H + _HUB_DROP + 11 * k)
    return hubs


def _to_hub(a: _Box, hub: tuple[float, float]) -> _Curve:
    """The control points of a bundled edge from box `a` to its hub, arriving from below
    or from the side so the curves fan into the hub rather than cross the target."""
    hx, hy = hub
    if a.x + a.width < hx:  # from the left: the source's right side, into the hub sideways
        x0 = a.x + a.width
        bend = max((hx - x0) / 2, 20.0)
        return (x0, a.middle), (x0 + bend, a.middle), (hx - bend, hy), (hx, hy)
    # From the right or from the same column: an arc under, lower the further it comes.
    x0 = a.x + a.width / 2
    low = max(a.y + _NODE_H, hy) + 24 + abs(x0 - hx) / 8
    return (x0, a.y + _NODE_H), (x0, low), (hx + 24, low), (hx, hy)


@dataclass(frozen=True, slots=True)
class _Trunk:
    bundle: _Bundle
    hub: tuple[float, float]
    tip: tuple[float, float]  # where the arrow ends: the middle of the target's bottom
    caption: tuple[float, float, str]


def _trunk(bundle: _Bundle, target: _Box, hub: tuple[float, float]) -> _Trunk:
    hx, hy = hub
    return _Trunk(bundle, hub, (hx, target.y + _NODE_H), (hx + 5, hy + 3, _cut(bundle.caption)))


def _draw_trunk(trunk: _Trunk) -> str:
    (hx, hy), (tx, ty) = trunk.hub, trunk.tip
    x, y, text = trunk.caption
    rows = " ".join(str(r) for edge in trunk.bundle.edges for r in edge.rows)
    sources = len(trunk.bundle.edges)
    tooltip = escape(f"{trunk.bundle.caption}: from {sources} states (hover each curve)")
    return (
        f'<g class="trunk" data-rows="{rows}"><title>{tooltip}</title>'
        f'<circle cx="{hx:.1f}" cy="{hy:.1f}" r="2.5"/>'
        f'<path d="M{hx:.1f},{hy:.1f} L{tx:.1f},{ty + 1:.1f}"/>'
        f"{_arrow_head(hx, hy, tx, ty)}"
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="start">{escape(text)}</text></g>'
    )


def _inputs(edge: _Edge) -> str:
    """The inputs of an edge's rows, in row order, once each."""
    return ", ".join(dict.fromkeys(text.split(" ")[0] for text in edge.labels))


def _cut(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"


def _caption(edge: _Edge, points: _Curve) -> tuple[float, float, str]:
    """Where the edge's label goes (the curve's midpoint, t = 1/2) and what it says: the
    inputs of its rows, cut when long (the tooltip has every row in full)."""
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = points
    shown = _cut(_inputs(edge))
    return (x0 + 3 * x1 + 3 * x2 + x3) / 8, (y0 + 3 * y1 + 3 * y2 + y3) / 8 - 4, shown


def _draw_edge(edge: _Edge, points: _Curve, caption: tuple[float, float, str] | None) -> str:
    """An edge; a bundled one (`caption` None) ends at its hub, with no arrow or label."""
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = points
    rows = " ".join(map(str, edge.rows))
    tooltip = escape("\n".join(edge.labels))
    drawn = (
        f'<g class="edge" data-rows="{rows}"><title>{tooltip}</title>'
        f'<path d="M{x0:.1f},{y0:.1f} C{x1:.1f},{y1:.1f} {x2:.1f},{y2:.1f} {x3:.1f},{y3:.1f}"/>'
    )
    if caption is None:
        return drawn + "</g>"
    x, y, text = caption
    return (
        f"{drawn}{_arrow_head(x2, y2, x3, y3)}"
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="middle">{escape(text)}</text></g>'
    )


def _arrow_head(x2: float, y2: float, x3: float, y3: float) -> str:
    """A filled triangle at `(x3, y3)` pointing along `(x2, y2) -> (x3, y3)`."""
    dx, dy = x3 - x2, y3 - y2
    length = (dx * dx + dy * dy) ** 0.5 or 1.0
    ux, uy = dx / length, dy / length
    back_x, back_y = x3 - 8 * ux, y3 - 8 * uy
    corners = (
        (x3, y3),
        (back_x - 4 * uy, back_y + 4 * ux),
        (back_x + 4 * uy, back_y - 4 * ux),
    )
    return '<polygon points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in corners) + '"/>'
