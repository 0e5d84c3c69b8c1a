"""Diagrams drawn from the table itself: Mermaid, Graphviz DOT and SVG, with trace overlays.

What lives here: a small pipeline, table -> edges -> text. Every renderer reads the same
edge list, so the Mermaid and DOT drawings of one table cannot disagree. What it does not
know: where diagrams are shown; it returns text (or SVG bytes from the `dot` binary) and
`write_diagrams` writes the committed set.

Conventions of every drawing:
- one edge per row and source, labelled `input [guard] / effect, effect` (`Row.label`),
  except that a row leaving `MERGE_SOURCES` or more states (a failure row: `failed` from
  every phase into `stopped`) is drawn as one labelled edge out of a junction its sources
  join, and the self-loops of one state are drawn as one loop with a label line per row;
- a row that holds its state is a self-loop; ignored pairs are not drawn (`quiesce
  tables` lists them), except when a trace steps through one;
- the initial state has an entry arrow, final states are marked (Mermaid: an arrow to
  `[*]`; DOT: a double border);
- output is deterministic (states in enum order, edges in row order), so committed
  diagrams compare byte for byte.

A trace is a JSON list of `{"state", "input", "target"}` steps by spec names. Its edges
are numbered in step order (`1. prepare`) and highlighted; Mermaid has no edge styling in
state diagrams and forbids `:` in labels, so there the numbers carry the order and the
visited states get the `traced` class. A step may also carry `"violates": <property>`
(the step of a counterexample that broke the property: drawn in red, its states get the
`violated` class) and `"variant": <name>` (a move of a mutated variant of the table that
the table itself has no row for: drawn dashed, outside the table).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from quiesce.fsm._errors import QuiesceError
from quiesce.fsm._table import Table, label

__all__ = [
    "REGENERATE_COMMAND",
    "DiagramError",
    "GraphvizFailed",
    "GraphvizNotFound",
    "TraceError",
    "TraceStep",
    "load_trace",
    "render",
    "render_dot",
    "render_mermaid",
    "render_svg",
    "write_diagrams",
]

REGENERATE_COMMAND = "uv run quiesce diagrams --out-dir docs/diagrams"
"""The one command that rewrites the committed diagrams under `docs/diagrams/`."""

DiagramFormat = Literal["mermaid", "dot", "svg"]

MERGE_SOURCES = 3
"""A row leaving this many states or more is drawn as one edge out of a junction."""

# Highlight of traced edges and visited states (DOT and Mermaid); the violating step's
# edge and states in red.
_TRACE_COLOR = "#d9480f"
_TRACE_FILL = "#ffe8cc"
_VIOLATION_COLOR = "#c92a2a"
_VIOLATION_FILL = "#ffc9c9"
# DOT wraps a label after its input and guard when it is longer than this: in a
# left-to-right layout a label's width widens its rank, so long one-line labels made
# the checkpoint diagram thousands of points wide.
_WRAP_AT = 24


class DiagramError(QuiesceError):
    """A diagram cannot be drawn."""


class GraphvizNotFound(DiagramError):
    """The `dot` binary is not on `PATH`, so SVG cannot be rendered."""

    def __init__(self, binary: str = "dot") -> None:
        self.binary = binary
        super().__init__(
            f"Graphviz `{binary}` is not installed, so SVG cannot be rendered: "
            "apt-get install graphviz (or use --format dot / mermaid)"
        )


class GraphvizFailed(DiagramError):
    """`dot` ran but failed; `returncode` and `stderr` say how."""

    def __init__(self, returncode: int, stderr: str) -> None:
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"Graphviz `dot` failed with exit code {returncode}: {stderr.strip()}")


class TraceError(DiagramError):
    """A trace step does not fit the table: `index` (0-based), `field` and `value` say which.

    `field` is `state`, `input`, `target`, `step` (the step matches no row of the table)
    or `trace` (the document is not a list of steps).
    """

    def __init__(self, table: str, index: int | None, field: str, value: Any, reason: str) -> None:
        self.table = table
        self.index = index
        self.field = field
        self.value = value
        self.reason = reason
        where = "trace" if index is None else f"trace step {index}"
        super().__init__(f"{where} of table {table!r}: {field} {value!r} {reason}")


class TraceStep(BaseModel):
    """One step of a trace: in `state`, `input` arrived and the machine went to `target`.

    `violates` names the property a counterexample broke at this step; `variant` names
    the mutated variant of the table whose move this is, when the table has no row for it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: str
    input: str
    target: str
    violates: str | None = None
    variant: str | None = None


@dataclass(frozen=True, slots=True)
class _Edge:
    """One row from one source (or a traced move outside the rows), before merging."""

    source: Enum
    target: Enum
    label: str
    row: int | None  # the row's index; None for a move outside the rows
    dashed: bool = False  # an ignored pair or a variant's move, drawn only for the trace


@dataclass(frozen=True, slots=True)
class _Arrow:
    """One arrow as drawn: between two node ids (a state's label or a junction's id)."""

    source: str
    target: str
    lines: tuple[str, ...]  # label lines (numbered by the trace); () draws no label
    traced: bool = False
    violating: bool = False
    dashed: bool = False
    into_junction: bool = False  # a source joining a merged row: no arrowhead, no label


@dataclass(frozen=True, slots=True)
class _Drawing:
    """What every renderer draws: arrows, junctions, and the states the trace visited."""

    arrows: tuple[_Arrow, ...]
    junctions: tuple[str, ...]
    visited: frozenset[Enum]
    violated: frozenset[Enum]


def load_trace(table: Table[Any, Any], source: str | Path | Sequence[Any]) -> list[TraceStep]:
    """Read and check a trace for `table`: a path to a JSON file, or the parsed list.

    The trace must have at least one step, and every step must name known states and input
    and match a row of the table (or an ignored pair that keeps its state); otherwise
    `TraceError` names the step and value. A file must be UTF-8 JSON: anything else (no
    such file, other bytes, no text at all) is a `TraceError` too.
    """
    document = _read_trace(table, source) if isinstance(source, str | Path) else source
    if not isinstance(document, list):
        raise TraceError(
            table.name, None, "trace", type(document).__name__, "must be a JSON list of steps"
        )
    if not document:
        # Drawing the plain table for an empty trace would hide a broken trace producer.
        raise TraceError(table.name, None, "trace", [], "has no steps: a trace needs one or more")
    steps: list[TraceStep] = []
    for index, raw in enumerate(document):
        try:
            step = TraceStep.model_validate(raw)
        except ValidationError as error:
            problem = error.errors()[0]
            field = ".".join(str(p) for p in problem["loc"]) or "step"
            raise TraceError(
                table.name,
                index,
                field,
                problem.get("input", raw),
                f"is invalid: {problem['msg']} (a step is "
                '{"state": ..., "input": ..., "target": ...})',
            ) from None
        _match(table, index, step)
        steps.append(step)
    return steps


def render_mermaid(table: Table[Any, Any], trace: Sequence[TraceStep] = ()) -> str:
    """The table as a Mermaid `stateDiagram-v2` (no system dependency).

    >>> print(render_mermaid(ADMISSION_GATE))  # doctest: +SKIP
    stateDiagram-v2
        [*] --> open
        open --> closed : hold / close_admission
        ...
    """
    drawing = _drawing(table, trace)
    ids = _mermaid_ids(table)
    lines = [
        # Comments go after the header: older Mermaid detects the type from the first line.
        "stateDiagram-v2",
        f"    %% {_title(table)}",
        f"    %% generated from the table; regenerate with: {REGENERATE_COMMAND}",
        "    direction LR",
    ]
    for state in table.states:
        if ids[state] != label(state):
            lines.append(f'    state "{label(state)}" as {ids[state]}')
    lines.extend(f"    state {junction} <<join>>" for junction in drawing.junctions)
    lines.append(f"    [*] --> {ids[table.initial]}")
    node = {label(s): ids[s] for s in table.states} | {j: j for j in drawing.junctions}
    for arrow in drawing.arrows:
        line = f"    {node[arrow.source]} --> {node[arrow.target]}"
        if arrow.lines:
            line += " : " + "<br/>".join(_mermaid_text(text) for text in arrow.lines)
        lines.append(line)
    for state in table.states:
        if state in table.finals:
            lines.append(f"    {ids[state]} --> [*]")
    for name, fill, stroke, states in (
        ("traced", _TRACE_FILL, _TRACE_COLOR, drawing.visited - drawing.violated),
        ("violated", _VIOLATION_FILL, _VIOLATION_COLOR, drawing.violated),
    ):
        if states:
            lines.append(f"    classDef {name} fill:{fill},stroke:{stroke},stroke-width:2px")
            lines.append(
                f"    class {','.join(ids[s] for s in table.states if s in states)} {name}"
            )
    return "\n".join(lines) + "\n"


def render_dot(table: Table[Any, Any], trace: Sequence[TraceStep] = ()) -> str:
    """The table as Graphviz DOT source (render it with `dot -Tsvg`), left to right."""
    drawing = _drawing(table, trace)
    lines = [
        f"// {_title(table)}",
        f"// generated from the table; regenerate with: {REGENERATE_COMMAND}",
        f"digraph {_dot_quote(table.name)} {{",
        "  rankdir=LR;",
        "  ranksep=0.25;",
        "  nodesep=0.2;",
        '  node [shape=box, style="rounded", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
        '  "__initial" [shape=point, width=0.15, label=""];',
    ]
    for state in table.states:
        attrs = []
        if state in table.finals:
            attrs.append("peripheries=2")
        if state in drawing.visited:
            fill, color = (
                (_VIOLATION_FILL, _VIOLATION_COLOR)
                if state in drawing.violated
                else (_TRACE_FILL, _TRACE_COLOR)
            )
            attrs.append(f'style="rounded,filled", fillcolor="{fill}", color="{color}"')
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"  {_dot_quote(label(state))}{suffix};")
    for junction in drawing.junctions:
        lines.append(f'  "{junction}" [shape=point, width=0.08, label=""];')
    lines.append(f'  "__initial" -> {_dot_quote(label(table.initial))};')
    for arrow in drawing.arrows:
        attrs = []
        if arrow.lines:
            # A loop's label has a line per row, kept whole so each line reads as one row.
            rows = arrow.lines if len(arrow.lines) > 1 else (_wrapped(arrow.lines[0]),)
            text = "\n".join(rows)
            attrs.append(f"label={_dot_quote(text)}")
        if arrow.into_junction:
            attrs.append("arrowhead=none")
        if arrow.dashed:
            attrs.append("style=dashed")
        if arrow.traced or arrow.violating:
            color = _VIOLATION_COLOR if arrow.violating else _TRACE_COLOR
            attrs.append(f'color="{color}", fontcolor="{color}", penwidth=2.5')
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"  {_dot_quote(arrow.source)} -> {_dot_quote(arrow.target)}{suffix};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_svg(table: Table[Any, Any], trace: Sequence[TraceStep] = ()) -> str:
    """The table as SVG, by piping `render_dot` through Graphviz's `dot -Tsvg`.

    Raises `GraphvizNotFound` (naming `apt-get install graphviz`) when `dot` is missing.
    """
    binary = shutil.which("dot")
    if binary is None:
        raise GraphvizNotFound()
    result = subprocess.run(
        [binary, "-Tsvg"],
        input=render_dot(table, trace),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise GraphvizFailed(result.returncode, result.stderr)
    return result.stdout


def render(table: Table[Any, Any], format: DiagramFormat, trace: Sequence[TraceStep] = ()) -> str:
    """Render `table` in `format` (`mermaid`, `dot` or `svg`), with an optional trace."""
    renderers = {"mermaid": render_mermaid, "dot": render_dot, "svg": render_svg}
    if format not in renderers:
        raise ValueError(f"unknown diagram format {format!r}; use one of {sorted(renderers)}")
    return renderers[format](table, trace)


def write_diagrams(directory: str | Path, tables: Iterable[Table[Any, Any]]) -> list[Path]:
    """(Re)write `<name>.mmd` and `<name>.dot` for each table into `directory`.

    Only Mermaid and DOT are written: SVG output depends on the installed Graphviz
    version, so committing it would make the staleness test depend on the machine.
    Returns the written paths; files are only rewritten when their content changed.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for table in tables:
        for suffix, text in ((".mmd", render_mermaid(table)), (".dot", render_dot(table))):
            path = root / f"{table.name}{suffix}"
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


# ---------------------------------------------------------------------- internals


def _read_trace(table: Table[Any, Any], path: str | Path) -> Any:
    """The parsed JSON document of the trace file at `path`, or `TraceError` saying why not."""

    def refuse(reason: str) -> TraceError:
        return TraceError(table.name, None, "trace", str(path), reason)

    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise refuse(
            f"is not UTF-8 text (byte {error.object[error.start]:#04x} at offset {error.start})"
        ) from None
    except OSError as error:
        raise refuse(f"cannot be read: {error.strerror or error}") from None
    if not text.strip():
        raise refuse('is empty: a trace is a JSON list of {"state", "input", "target"} steps')
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise refuse(f"is not JSON: {error}") from None


def _drawing(table: Table[Any, Any], trace: Sequence[TraceStep]) -> _Drawing:
    edges = [
        _Edge(source, row.target or source, row.label(), index)
        for index, row in enumerate(table.rows)
        for source in row.sources
    ]
    steps: list[list[int]] = [[] for _ in edges]
    # Per edge, the steps on it that violate a property, with the property.
    broken: list[list[tuple[int, str]]] = [[] for _ in edges]
    visited: set[Enum] = set()
    violated: set[Enum] = set()
    outside: dict[tuple[Enum, Enum, str], int] = {}  # traced moves that are no row's
    for index, step in enumerate(trace):
        state, input, target = _match(table, index, step)
        visited.update((state, target))
        at = next(
            (
                i
                for i, edge in enumerate(edges)
                if edge.row is not None
                and edge.source is state
                and edge.target is target
                and table.rows[edge.row].input is input
            ),
            None,
        )
        if at is None:
            # An ignored pair, or a variant's move: drawn (dashed) only for the trace.
            why = "ignored" if step.variant is None else f"variant {step.variant}"
            text = f"{label(input)} ({why})"
            at = outside.get((state, target, text))
            if at is None:
                at = outside[(state, target, text)] = len(edges)
                edges.append(_Edge(state, target, text, None, dashed=True))
                steps.append([])
                broken.append([])
        steps[at].append(index + 1)
        if step.violates is not None:
            broken[at].append((index + 1, step.violates))
            violated.update((state, target))
    arrows, junctions = _arrows(table, edges, steps, broken)
    return _Drawing(arrows, junctions, frozenset(visited), frozenset(violated))


def _arrows(
    table: Table[Any, Any],
    edges: Sequence[_Edge],
    steps: Sequence[Sequence[int]],
    broken: Sequence[Sequence[tuple[int, str]]],
) -> tuple[tuple[_Arrow, ...], tuple[str, ...]]:
    """The edges as drawn: a row leaving `MERGE_SOURCES` states or more through a junction,
    the self-loops of a state as one loop (at its first), everything else one arrow each."""

    def text(ats: Sequence[int], numbers: Sequence[int]) -> str:
        """The label of edges `ats` (one row), numbered, naming the properties they break:
        `1, 4. go (violates I3 at 4)` when only some of its steps break one."""
        violating = sorted({n for at in ats for n, _ in broken[at]})
        properties = dict.fromkeys(p for at in ats for _, p in sorted(broken[at]))
        if not properties:
            return _numbered(numbers, edges[ats[0]].label)
        where = "" if violating == sorted(numbers) else f" at {', '.join(map(str, violating))}"
        return (
            f"{_numbered(numbers, edges[ats[0]].label)} (violates {', '.join(properties)}{where})"
        )

    loops: dict[Enum, list[int]] = {}
    for at, edge in enumerate(edges):
        if edge.source is edge.target and not edge.dashed:
            loops.setdefault(edge.source, []).append(at)
    arrows: list[_Arrow] = []
    junctions: list[str] = []
    merged: dict[str, list[int]] = {}  # junction -> the edges of its row
    for at, edge in enumerate(edges):
        row = None if edge.row is None else table.rows[edge.row]
        if row is not None and row.target is not None and len(row.sources) >= MERGE_SOURCES:
            junction = f"__row{edge.row}"
            members = merged.setdefault(junction, [])
            if not members:
                junctions.append(junction)
            members.append(at)
            arrows.append(
                _Arrow(
                    label(edge.source),
                    junction,
                    (),
                    traced=bool(steps[at]),
                    violating=bool(broken[at]),
                    into_junction=True,
                )
            )
            if len(members) == len(row.sources):
                numbers = sorted(n for m in members for n in steps[m])
                arrows.append(
                    _Arrow(
                        junction,
                        label(edge.target),
                        (text(members, numbers),),
                        traced=bool(numbers),
                        violating=any(broken[m] for m in members),
                    )
                )
            continue
        group = loops.get(edge.source, []) if edge.source is edge.target else []
        if at in group and at != group[0]:
            continue  # drawn as a line of the state's one loop
        members = group if at in group else [at]
        arrows.append(
            _Arrow(
                label(edge.source),
                label(edge.target),
                tuple(text([m], steps[m]) for m in members),
                traced=any(steps[m] for m in members),
                violating=any(broken[m] for m in members),
                dashed=edge.dashed,
            )
        )
    return tuple(arrows), tuple(junctions)


def _match(table: Table[Any, Any], index: int, step: TraceStep) -> tuple[Enum, Enum, Enum]:
    """The step's members, or `TraceError` when it names or takes no move of the table."""
    states = {label(s): s for s in table.states}
    inputs = {label(i): i for i in table.inputs}
    for field, value, known in (
        ("state", step.state, states),
        ("input", step.input, inputs),
        ("target", step.target, states),
    ):
        if value not in known:
            raise TraceError(table.name, index, field, value, f"is not one of {sorted(known)}")
    state, input, target = states[step.state], inputs[step.input], states[step.target]
    rows = table.rows_for(state, input)
    if any((row.target or state) is target for row in rows):
        return state, input, target
    if not rows and (state, input) in table.ignored and target is state:
        return state, input, target
    if step.variant is not None:
        return state, input, target  # a mutated variant's own move, drawn outside the rows
    possible = sorted({label(row.target or state) for row in rows})
    reason = (
        f"is not a move of the table: {step.state} + {step.input} goes to {possible}"
        if possible
        else f"is not a move of the table: {step.input} is {table.disposition(state, input)} "
        f"in {step.state}"
    )
    raise TraceError(
        table.name, index, "step", f"{step.state} + {step.input} -> {step.target}", reason
    )


def _title(table: Table[Any, Any]) -> str:
    # One line: a multi-line doc would end the comment early.
    name = table.name if table.variant is None else f"{table.name} (variant {table.variant})"
    doc = " ".join(table.doc.split())
    return f"{name}: {doc}" if doc else name


def _numbered(steps: Sequence[int], text: str) -> str:
    return f"{', '.join(map(str, steps))}. {text}" if steps else text


# Mermaid ids: `\w+` only, and a leading `default` is a keyword of its state-diagram lexer.
_MERMAID_ID = re.compile(r"[A-Za-z_]\w*")


def _mermaid_ids(table: Table[Any, Any]) -> dict[Enum, str]:
    ids: dict[Enum, str] = {}
    for state in table.states:
        name = label(state)
        plain = _MERMAID_ID.fullmatch(name) and not name.lower().startswith("default")
        ids[state] = name if plain else f"_s{len(ids)}"
    return ids


def _mermaid_text(text: str) -> str:
    # The lexer ends a transition label at `:`, `;` or a newline.
    return re.sub(r"[:;\n]", " ", text)


def _wrapped(text: str) -> str:
    """A long label on several lines: its input and guard, then its effects packed into
    lines of about `_WRAP_AT` characters (a label's width widens its whole rank)."""
    if len(text) <= _WRAP_AT or " / " not in text:
        return text
    head, _, effects = text.partition(" / ")
    lines = [head]
    line = "/"
    for effect in effects.split(", "):
        if line != "/" and len(line) + len(effect) + 2 > _WRAP_AT:
            lines.append(line + ",")
            line = ""
        line = f"{line} {effect}" if line == "/" else (f"{line}, {effect}" if line else effect)
    lines.append(line)
    return "\n".join(lines)


def _dot_quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n") + '"'
