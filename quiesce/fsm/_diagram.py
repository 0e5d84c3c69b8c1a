"""Diagrams drawn from the table itself: Mermaid, Graphviz DOT and SVG, with trace overlays.

What lives here: a small pipeline, table -> edges -> text. Every renderer reads the same
edge list, so the Mermaid and DOT drawings of one table cannot disagree. What it does not
know: where diagrams are shown; it returns text (or SVG bytes from the `dot` binary) and
`write_diagrams` writes the committed set.

Conventions of every drawing:
- one edge per row and source, labelled `input [guard] / effect, effect` (`Row.label`);
- a row that holds its state is a self-loop; ignored pairs are not drawn (`quiesce
  tables` lists them), except when a trace steps through one;
- the initial state has an entry arrow, final states are marked (Mermaid: an arrow to
  `[*]`; DOT: a double border);
- output is deterministic (states in enum order, edges in row order), so committed
  diagrams compare byte for byte.

A trace is a JSON list of `{"state", "input", "target"}` steps by spec names. Its edges
are numbered in step order (`1. prepare`) and highlighted; Mermaid has no edge styling in
state diagrams and forbids `:` in labels, so there the numbers carry the order and the
visited states get the `traced` class.
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
from quiesce.fsm._table import Row, Table, label

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

# Highlight of traced edges and visited states (DOT and Mermaid).
_TRACE_COLOR = "#d9480f"
_TRACE_FILL = "#ffe8cc"


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
    """One step of a trace: in `state`, `input` arrived and the machine went to `target`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: str
    input: str
    target: str


@dataclass(frozen=True, slots=True)
class _Edge:
    source: Enum
    target: Enum
    label: str
    ignored: bool = False  # a traced step through an ignored pair, drawn only for the trace


@dataclass(frozen=True, slots=True)
class _Drawing:
    """What every renderer draws: edges with their step numbers, and visited states."""

    edges: tuple[_Edge, ...]
    steps: tuple[tuple[int, ...], ...]  # per edge, the 1-based trace steps through it
    visited: frozenset[Enum]


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
    lines.append(f"    [*] --> {ids[table.initial]}")
    for edge, steps in zip(drawing.edges, drawing.steps, strict=True):
        text = _numbered(steps, edge.label)
        lines.append(f"    {ids[edge.source]} --> {ids[edge.target]} : {_mermaid_text(text)}")
    for state in table.states:
        if state in table.finals:
            lines.append(f"    {ids[state]} --> [*]")
    if drawing.visited:
        lines.append(
            f"    classDef traced fill:{_TRACE_FILL},stroke:{_TRACE_COLOR},stroke-width:2px"
        )
        visited = ",".join(ids[s] for s in table.states if s in drawing.visited)
        lines.append(f"    class {visited} traced")
    return "\n".join(lines) + "\n"


def render_dot(table: Table[Any, Any], trace: Sequence[TraceStep] = ()) -> str:
    """The table as Graphviz DOT source (render it with `dot -Tsvg`)."""
    drawing = _drawing(table, trace)
    lines = [
        f"// {_title(table)}",
        f"// generated from the table; regenerate with: {REGENERATE_COMMAND}",
        f"digraph {_dot_quote(table.name)} {{",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
        '  "__initial" [shape=point, width=0.15, label=""];',
    ]
    for state in table.states:
        attrs = []
        if state in table.finals:
            attrs.append("peripheries=2")
        if state in drawing.visited:
            attrs.append(
                f'style="rounded,filled", fillcolor="{_TRACE_FILL}", color="{_TRACE_COLOR}"'
            )
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"  {_dot_quote(label(state))}{suffix};")
    lines.append(f'  "__initial" -> {_dot_quote(label(table.initial))};')
    for edge, steps in zip(drawing.edges, drawing.steps, strict=True):
        attrs = [f"label={_dot_quote(_numbered(steps, edge.label))}"]
        if edge.ignored:
            attrs.append("style=dashed")
        if steps:
            attrs.append(f'color="{_TRACE_COLOR}", fontcolor="{_TRACE_COLOR}", penwidth=2.5')
        source, target = _dot_quote(label(edge.source)), _dot_quote(label(edge.target))
        lines.append(f"  {source} -> {target} [{', '.join(attrs)}];")
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


def _edges(table: Table[Any, Any]) -> list[tuple[_Edge, Row]]:
    return [
        (_Edge(source, row.target or source, row.label()), row)
        for row in table.rows
        for source in row.sources
    ]


def _drawing(table: Table[Any, Any], trace: Sequence[TraceStep]) -> _Drawing:
    pairs = _edges(table)
    edges = [edge for edge, _ in pairs]
    steps: list[list[int]] = [[] for _ in edges]
    visited: set[Enum] = set()
    ignored_at: dict[tuple[Enum, Enum], int] = {}
    for index, step in enumerate(trace):
        state, input, target = _match(table, index, step)
        visited.update((state, target))
        at = next(
            (
                i
                for i, (edge, row) in enumerate(pairs)
                if edge.source is state and row.input is input and edge.target is target
            ),
            None,
        )
        if at is None:
            # The step went through an ignored pair: drawn (dashed) only for the trace.
            at = ignored_at.get((state, input))
            if at is None:
                at = ignored_at[(state, input)] = len(edges)
                edges.append(_Edge(state, state, f"{label(input)} (ignored)", ignored=True))
                steps.append([])
        steps[at].append(index + 1)
    return _Drawing(tuple(edges), tuple(tuple(s) for s in steps), frozenset(visited))


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


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
