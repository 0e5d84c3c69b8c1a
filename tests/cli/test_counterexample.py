"""A counterexample as a story: numbered steps with diffs, traces that keep the violating
step, file names no shell expands, and a diagram that highlights the violation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from quiesce.cli import main
from quiesce.cli._counterexample import field_diff, flat_fields, trace_file_stem

S17 = ["check", "--walks", "200", "--mutant", "S17_retire_releases_completed"]


@pytest.fixture(scope="module")
def s17(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    """Issue 14's S17 example (the default `design` model), run once: its result and its
    --trace-out directory."""
    out = tmp_path_factory.mktemp("s17") / "traces"
    ran = CliRunner().invoke(main, [*S17, "--trace-out", str(out)])
    assert ran.exit_code == 1, ran.output
    return ran, out


def test_the_story_numbers_the_steps_and_shows_only_what_changed(
    s17: tuple[Result, Path],
) -> None:
    ran, _ = s17
    story = ran.stdout[ran.stdout.index("I1 violated") :]
    assert "initial state:" in story
    # The whole state is printed once (the initial state); a step shows its diff.
    assert story.count('"triggers":') == 1
    steps = re.findall(r"^ +(\d+)\. (.+)$", story, flags=re.MULTILINE)
    assert [int(n) for n, _ in steps] == list(range(1, len(steps) + 1))
    # The group's deadline retires s0#0 in the same atomic step, and S17's row releases
    # its completed, un-ACKed result there: the state before it still held the result.
    last = steps[-1][1]
    assert last.startswith("the group's deadline expires") and "I1 violated here" in last
    tail = story[story.index(last) :]
    assert (
        "agent_execution[g0-0#0]: completed --retire--> tombstoned"
        " (variant retire_releases_completed, not in the table)" in tail
    )
    assert 'parts.executions: -{"sibling":0,"attempt":0,"state":"completed","turn":1}' in tail
    assert "I1 is false after the last step; the fields the last step changed:" in tail


def test_the_agent_trace_keeps_the_violating_step_and_the_diagram_highlights_it(
    s17: tuple[Result, Path],
) -> None:
    ran, out = s17
    trace = out / "I1.agent_execution.g0-0_0.json"
    steps = json.loads(trace.read_text())
    assert steps[-1] == {
        "state": "completed",
        "input": "retire",
        "target": "tombstoned",
        "variant": "retire_releases_completed",
        "violates": "I1",
    }
    assert f"{trace} (has the violating step)" in ran.stderr
    assert f"quiesce diagram agent_execution --trace {trace}" in ran.stderr
    plain = CliRunner().invoke(main, ["diagram", "agent_execution"])
    drawn = CliRunner().invoke(main, ["diagram", "agent_execution", "--trace", str(trace)])
    assert drawn.exit_code == 0, drawn.output
    assert drawn.stdout != plain.stdout
    assert (
        "completed --> tombstoned : 2. retire (variant retire_releases_completed) (violates I1)"
        in drawn.stdout
    )
    assert "class completed,tombstoned violated" in drawn.stdout


def test_trace_files_have_safe_names_and_untouched_tables_are_named(
    s17: tuple[Result, Path],
) -> None:
    ran, out = s17
    names = sorted(p.name for p in out.iterdir())
    assert "I1.sequence.mmd" in names
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", name) for name in names), names
    assert all(json.loads((out / n).read_text()) for n in names if n.endswith(".json"))
    # The checkpoint moved (two triggers, two prepare deadlines) but not at the last step.
    checkpoint = json.loads((out / "I1.checkpoint.json").read_text())
    assert checkpoint[0] == {"state": "idle", "input": "trigger", "target": "closing_admission"}
    assert not any("violates" in step for step in checkpoint)
    assert "no trace file for restore, control_fence[policy]," in ran.stderr
    assert "moves no table" not in ran.stderr
    assert "sequenceDiagram" in (out / "I1.sequence.mmd").read_text()


@pytest.mark.parametrize(
    ("instance", "stem"),
    [
        ("agent_execution[g0-0#0]", "agent_execution.g0-0_0"),
        ("control_fence[agent]", "control_fence.agent"),
        ("checkpoint", "checkpoint"),
        ("rm1", "rm1"),
        ("odd[a*b?c]", "odd.a_b_c"),
    ],
)
def test_trace_file_stems_are_readable_and_glob_free(instance: str, stem: str) -> None:
    assert trace_file_stem(instance) == stem


def test_field_diff_shows_changed_added_and_removed_fields_and_list_moves() -> None:
    before = {"a": 1, "m": {"x": [0, 1], "gone": True}, "q": ["p", "r"]}
    after = {"a": 1, "m": {"x": [0, 2], "new": "n"}, "q": ["r", "s"]}
    assert field_diff(before, after) == {
        "m.x": "-1 +2",
        "m.gone": "true -> (none)",
        "q": '-"p" +"s"',
        "m.new": '(none) -> "n"',
    }
    assert field_diff({"q": [1, 2]}, {"q": [2, 1]}) == {"q": "[1,2] -> [2,1]"}


def test_flat_fields_opens_mappings_to_the_depth_asked() -> None:
    state = {"a": {"b": {"c": 1}}, "e": {}}
    assert flat_fields(state) == {"a.b.c": 1, "e": {}}
    assert flat_fields(state, depth=1) == {"a": {"b": {"c": 1}}, "e": {}}


def test_a_two_phase_trace_is_drawn_by_the_command_check_prints(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    args = ["check", "two-phase", "--mutant", "commit_without_message", "--trace-out", str(out)]
    ran = CliRunner().invoke(main, args)
    assert ran.exit_code == 1
    hint = re.search(r"draw one with: quiesce (.+)", ran.stderr)
    assert hint is not None, ran.stderr
    assert hint.group(1).startswith("diagram rm --model two-phase --trace ")
    drawn = CliRunner().invoke(main, hint.group(1).split())
    assert drawn.exit_code == 0, drawn.output
    assert "__row2 --> committed : 1. recv_commit [commit_sent] (violates TCConsistent)" in (
        drawn.stdout
    )
