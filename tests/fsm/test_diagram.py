"""Diagrams: the renderers, trace overlays, the SVG path and the committed-diagram check."""

from __future__ import annotations

import json
import shutil
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from quiesce.fsm import (
    REGENERATE_COMMAND,
    GraphvizFailed,
    GraphvizNotFound,
    Table,
    TraceError,
    TraceStep,
    each,
    load_trace,
    on,
    render,
    render_dot,
    render_mermaid,
    render_svg,
    write_diagrams,
)
from quiesce.fsm import _diagram as diagram_module
from quiesce.protocol.machines import TABLES as REGISTERED

DIAGRAMS = Path(__file__).resolve().parents[2] / "docs" / "diagrams"


class Job(Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


class Event(Enum):
    RUN = "run"
    BEAT = "beat"
    FINISH = "finish"


JOB: Table[Job, Event] = Table(
    "job",
    doc="A job runs, beats, finishes.",
    states=Job,
    inputs=Event,
    initial=Job.QUEUED,
    finals=[Job.DONE],
    rows=[
        on(Job.QUEUED, Event.RUN, Job.RUNNING, guard="has_slot", effects=("start", "log")),
        on(Job.RUNNING, Event.BEAT, None, effects="extend"),
        on(Job.RUNNING, Event.FINISH, Job.DONE),
    ],
    ignored=[(Job.QUEUED, Event.BEAT)],
    forbidden=[(Job.QUEUED, Event.FINISH), (Job.RUNNING, Event.RUN), *each(Job.DONE, Event)],
    guards={"has_slot": lambda value, arg: True},
)


def steps(*moves: tuple[str, str, str]) -> list[TraceStep]:
    return [TraceStep(state=s, input=i, target=t) for s, i, t in moves]


# --------------------------------------------------------------------------- mermaid


def test_mermaid_draws_every_row_with_guard_and_effects() -> None:
    assert render_mermaid(JOB) == (
        "stateDiagram-v2\n"
        "    %% job: A job runs, beats, finishes.\n"
        f"    %% generated from the table; regenerate with: {REGENERATE_COMMAND}\n"
        "    direction LR\n"
        "    [*] --> queued\n"
        "    queued --> running : run [has_slot] / start, log\n"
        "    running --> running : beat / extend\n"
        "    running --> done : finish\n"
        "    done --> [*]\n"
    )


def test_mermaid_aliases_state_names_its_lexer_would_misread() -> None:
    class Mode(Enum):
        DEFAULT = "default_mode"
        FAST = "fast-mode"

    class Switch(Enum):
        FLIP = "flip"

    table = Table(
        "modes",
        states=Mode,
        inputs=Switch,
        initial=Mode.DEFAULT,
        rows=[on(Mode.DEFAULT, Switch.FLIP, Mode.FAST), on(Mode.FAST, Switch.FLIP, Mode.DEFAULT)],
    )
    text = render_mermaid(table)
    assert '    state "default_mode" as _s0\n' in text
    assert '    state "fast-mode" as _s1\n' in text
    assert "    _s0 --> _s1 : flip\n" in text


def test_mermaid_labels_never_contain_a_colon() -> None:
    # Mermaid ends a transition label at `:` or `;`.
    table = JOB.derive(
        "odd",
        guards={"a:b;c": lambda v, arg: True},
        rows=[
            on(Job.QUEUED, Event.RUN, Job.RUNNING, guard="a:b;c"),
            *JOB.rows[1:],
        ],
    )
    line = next(x for x in render_mermaid(table).splitlines() if "queued --> running" in x)
    assert line == "    queued --> running : run [a b c]"


def test_the_variant_of_a_derived_table_is_in_the_title() -> None:
    assert "%% job (variant drop_row[1]): A job" in render_mermaid(JOB.without_row(1))


# --------------------------------------------------------------------------- dot


def test_dot_draws_initial_finals_holds_and_labels() -> None:
    text = render_dot(JOB)
    assert text.startswith("// job: A job runs, beats, finishes.\n")
    assert 'digraph "job" {' in text
    assert '  "__initial" -> "queued";' in text
    assert '  "done" [peripheries=2];' in text
    assert '  "queued";' in text
    # A label longer than a few words is wrapped after its input and guard: in a
    # left-to-right layout its width is its rank's.
    assert '  "queued" -> "running" [label="run [has_slot]\\n/ start, log"];' in text
    assert '  "running" -> "running" [label="beat / extend"];' in text
    assert "penwidth" not in text and "fillcolor" not in text
    assert text.endswith("}\n")


def test_dot_quotes_names() -> None:
    table = JOB.derive(
        "q",
        guards={'say "hi"': lambda v, arg: True},
        rows=[
            on(Job.QUEUED, Event.RUN, Job.RUNNING, guard='say "hi"'),
            *JOB.rows[1:],
        ],
    )
    assert r'[label="run [say \"hi\"]"];' in render_dot(table)


def test_rendering_is_deterministic() -> None:
    assert render_dot(JOB) == render_dot(JOB) and render_mermaid(JOB) == render_mermaid(JOB)
    assert render(JOB, "dot") == render_dot(JOB)
    with pytest.raises(ValueError, match="unknown diagram format 'png'"):
        render(JOB, "png")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- traces

TRACE = steps(
    ("queued", "run", "running"),
    ("running", "beat", "running"),
    ("running", "beat", "running"),
    ("running", "finish", "done"),
)


def test_a_trace_numbers_its_edges_in_order_and_highlights_them_in_dot() -> None:
    text = render_dot(JOB, TRACE)
    assert '[label="1. run [has_slot]\\n/ start, log", color="#d9480f"' in text
    assert (
        '[label="2, 3. beat / extend", color="#d9480f", fontcolor="#d9480f", penwidth=2.5]' in text
    )
    assert '[label="4. finish", color="#d9480f"' in text
    assert text.count("penwidth=2.5") == 3
    for state in ("queued", "running", "done"):
        assert f'"{state}" [' in text and 'fillcolor="#ffe8cc"' in text


def test_a_trace_in_mermaid_numbers_edges_and_classes_visited_states() -> None:
    text = render_mermaid(JOB, TRACE[:2])
    assert "    queued --> running : 1. run [has_slot] / start, log\n" in text
    assert "    running --> running : 2. beat / extend\n" in text
    assert "    running --> done : finish\n" in text
    assert "    classDef traced fill:#ffe8cc,stroke:#d9480f,stroke-width:2px\n" in text
    assert text.endswith("    class queued,running traced\n")


def test_an_untraced_drawing_has_no_highlight() -> None:
    assert "traced" not in render_mermaid(JOB, [])


def test_a_step_through_an_ignored_pair_is_drawn_dashed_for_the_trace() -> None:
    trace = steps(("queued", "beat", "queued"), ("queued", "beat", "queued"))
    text = render_dot(JOB, trace)
    assert '"queued" -> "queued" [label="1, 2. beat (ignored)", style=dashed' in text
    assert "    queued --> queued : 1, 2. beat (ignored)\n" in render_mermaid(JOB, trace)


# --------------------------------------------------------------------------- merging


class Phase(Enum):
    IDLE = "idle"
    ONE = "one"
    TWO = "two"
    THREE = "three"
    STOPPED = "stopped"


class Signal(Enum):
    GO = "go"
    PING = "ping"
    POKE = "poke"
    FAILED = "failed"


PHASES: Table[Phase, Signal] = Table(
    "phases",
    states=Phase,
    inputs=Signal,
    initial=Phase.IDLE,
    finals=[Phase.STOPPED],
    rows=[
        on(Phase.IDLE, Signal.GO, Phase.ONE),
        on(Phase.ONE, Signal.GO, Phase.TWO),
        on(Phase.TWO, Signal.GO, Phase.THREE),
        on(Phase.THREE, Signal.GO, Phase.IDLE),
        on(Phase.ONE, Signal.PING, None, effects="pong"),
        on(Phase.ONE, Signal.POKE, None),
        on([Phase.ONE, Phase.TWO, Phase.THREE], Signal.FAILED, Phase.STOPPED, effects="stop"),
    ],
    unmapped="ignored",
)


def test_a_row_from_many_states_is_one_labelled_edge_out_of_a_junction() -> None:
    dot = render_dot(PHASES)
    assert dot.count('-> "__row6" [arrowhead=none];') == 3
    assert dot.count("failed / stop") == 1
    assert '  "__row6" -> "stopped" [label="failed / stop"];' in dot
    mermaid = render_mermaid(PHASES)
    assert "    state __row6 <<join>>\n" in mermaid
    assert mermaid.count("--> __row6\n") == 3
    assert "    __row6 --> stopped : failed / stop\n" in mermaid


def test_the_self_loops_of_a_state_are_one_loop_with_a_line_per_row() -> None:
    assert '  "one" -> "one" [label="ping / pong\\npoke"];' in render_dot(PHASES)
    assert "    one --> one : ping / pong<br/>poke\n" in render_mermaid(PHASES)


def test_a_trace_through_a_junction_numbers_the_merged_edge() -> None:
    trace = steps(("idle", "go", "one"), ("one", "go", "two"), ("two", "failed", "stopped"))
    dot = render_dot(PHASES, trace)
    assert '"two" -> "__row6" [arrowhead=none, color="#d9480f"' in dot
    assert '"one" -> "__row6" [arrowhead=none];' in dot
    assert '"__row6" -> "stopped" [label="3. failed / stop", color="#d9480f"' in dot
    broken = [*trace[:2], TraceStep(state="two", input="failed", target="stopped", violates="P")]
    dot = render_dot(PHASES, broken)
    assert '"__row6" -> "stopped" [label="3. failed\\n/ stop (violates P)", color="#c92a2a"' in dot


def test_the_violating_step_is_drawn_in_red_and_names_the_property() -> None:
    trace = [
        TraceStep(state="idle", input="go", target="one"),
        TraceStep(state="one", input="go", target="two", violates="P1"),
    ]
    dot = render_dot(PHASES, trace)
    assert '"one" -> "two" [label="2. go (violates P1)", color="#c92a2a"' in dot
    assert '"two" [style="rounded,filled", fillcolor="#ffc9c9"' in dot
    mermaid = render_mermaid(PHASES, trace)
    assert "    one --> two : 2. go (violates P1)\n" in mermaid
    assert mermaid.endswith("    class one,two violated\n")
    assert mermaid != render_mermaid(PHASES, trace[:1])


def test_an_edge_taken_twice_names_only_the_step_that_violates() -> None:
    # idle -> one -> two -> three -> idle -> one: the edge idle -> one is steps 1 and 5.
    loop = [("idle", "go", "one"), ("one", "go", "two"), ("two", "go", "three")]
    trace = [*steps(*loop, ("three", "go", "idle"))]
    trace.append(TraceStep(state="idle", input="go", target="one", violates="I3"))
    mermaid = render_mermaid(PHASES, trace)
    assert "    idle --> one : 1, 5. go (violates I3 at 5)\n" in mermaid
    assert "    one --> two : 2. go\n" in mermaid


def test_a_variant_move_outside_the_table_is_drawn_dashed_only_when_named() -> None:
    move = {"state": "two", "input": "ping", "target": "idle"}
    with pytest.raises(TraceError, match="is not a move of the table"):
        load_trace(PHASES, [move])
    trace = load_trace(PHASES, [{**move, "variant": "broken", "violates": "P1"}])
    dot = render_dot(PHASES, trace)
    assert '"two" -> "idle" [label="1. ping (variant broken) (violates P1)", style=dashed' in dot


def test_load_trace_reads_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps([s.model_dump() for s in TRACE]))
    assert load_trace(JOB, path) == TRACE
    assert load_trace(JOB, str(path)) == TRACE


@pytest.mark.parametrize(
    ("trace", "index", "field", "value"),
    [
        ([{"state": "lost", "input": "run", "target": "running"}], 0, "state", "lost"),
        (
            [
                {"state": "queued", "input": "run", "target": "running"},
                {"state": "running", "input": "jump", "target": "done"},
            ],
            1,
            "input",
            "jump",
        ),
        ([{"state": "queued", "input": "run", "target": "nowhere"}], 0, "target", "nowhere"),
        (
            [{"state": "queued", "input": "run", "target": "done"}],
            0,
            "step",
            "queued + run -> done",
        ),
        ([{"state": "done", "input": "run", "target": "done"}], 0, "step", "done + run -> done"),
        (
            [{"state": "queued", "input": "beat", "target": "running"}],
            0,
            "step",
            "queued + beat -> running",
        ),
        ([{"state": "queued", "input": "run"}], 0, "target", {"state": "queued", "input": "run"}),
        ([{"state": "queued", "input": "run", "target": "running", "why": 1}], 0, "why", 1),
        ([["queued", "run", "running"]], 0, "step", ["queued", "run", "running"]),
        ({"state": "queued"}, None, "trace", "dict"),
    ],
)
def test_a_bad_trace_names_the_step_and_the_value(
    trace: Any, index: int | None, field: str, value: Any
) -> None:
    with pytest.raises(TraceError) as caught:
        load_trace(JOB, trace)
    error = caught.value
    assert (error.index, error.field, error.value) == (index, field, value)
    assert error.table == "job"
    assert repr(value) in str(error)
    if index is not None:
        assert f"trace step {index}" in str(error)


def test_a_step_that_is_no_move_says_where_the_pair_goes() -> None:
    with pytest.raises(TraceError, match=r"queued \+ run goes to \['running'\]"):
        load_trace(JOB, [{"state": "queued", "input": "run", "target": "done"}])
    with pytest.raises(TraceError, match="finish is forbidden in queued"):
        load_trace(JOB, [{"state": "queued", "input": "finish", "target": "done"}])


def test_renderers_check_the_trace_too() -> None:
    with pytest.raises(TraceError) as caught:
        render_dot(JOB, steps(("queued", "run", "running"), ("done", "run", "running")))
    assert caught.value.index == 1


def test_an_unreadable_trace_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot be read"):
        load_trace(JOB, tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(TraceError, match="is not JSON"):
        load_trace(JOB, bad)


# --------------------------------------------------------------------------- svg


def test_missing_graphviz_is_a_typed_error_naming_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(diagram_module.shutil, "which", lambda name: None)
    with pytest.raises(GraphvizNotFound, match="apt-get install graphviz") as caught:
        render_svg(JOB)
    assert caught.value.binary == "dot"


def test_a_failing_dot_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    false = shutil.which("false")
    assert false is not None
    monkeypatch.setattr(diagram_module.shutil, "which", lambda name: false)
    with pytest.raises(GraphvizFailed) as caught:
        render_svg(JOB)
    assert caught.value.returncode == 1


@pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz `dot` not installed: apt-get install graphviz"
)
def test_svg_is_rendered_by_graphviz_with_the_trace() -> None:
    plain = render_svg(JOB)
    assert (
        plain.lstrip().startswith("<?xml") and "<svg" in plain and plain.rstrip().endswith("</svg>")
    )
    assert "run [has_slot]" in plain and "/ start, log" in plain
    traced = render_svg(JOB, TRACE)
    assert "2, 3. beat / extend" in traced
    assert "#d9480f" in traced and "#d9480f" not in plain


# --------------------------------------------------------------------------- committed


def test_write_diagrams_writes_mermaid_and_dot_only(tmp_path: Path) -> None:
    written = write_diagrams(tmp_path / "out", [JOB])
    assert written == [tmp_path / "out" / "job.mmd", tmp_path / "out" / "job.dot"]
    assert (tmp_path / "out" / "job.mmd").read_text() == render_mermaid(JOB)
    assert (tmp_path / "out" / "job.dot").read_text() == render_dot(JOB)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["job.dot", "job.mmd"]


def test_write_diagrams_leaves_unchanged_files_alone(tmp_path: Path) -> None:
    (path,) = [p for p in write_diagrams(tmp_path, [JOB]) if p.suffix == ".dot"]
    stamp = path.stat().st_mtime_ns
    path.touch()
    touched = path.stat().st_mtime_ns
    write_diagrams(tmp_path, [JOB])
    assert path.stat().st_mtime_ns == touched >= stamp
    path.write_text("stale")
    write_diagrams(tmp_path, [JOB])
    assert path.read_text() == render_dot(JOB)


def test_committed_diagrams_match_their_tables() -> None:
    stale: list[str] = []
    tables = dict(REGISTERED)
    for name, table in tables.items():
        for suffix, text in ((".mmd", render_mermaid(table)), (".dot", render_dot(table))):
            path = DIAGRAMS / f"{name}{suffix}"
            if not path.exists():
                stale.append(f"{path.name} is missing")
            elif path.read_text(encoding="utf-8") != text:
                stale.append(f"{path.name} no longer matches table {name!r}")
    for path in sorted([*DIAGRAMS.glob("*.mmd"), *DIAGRAMS.glob("*.dot")]):
        if path.stem not in tables:
            stale.append(f"{path.name} has no registered table (delete it, or add --prune)")
    assert not stale, (
        "committed diagrams under docs/diagrams are stale:\n  "
        + "\n  ".join(stale)
        + f"\nregenerate them with: {REGENERATE_COMMAND}"
    )
