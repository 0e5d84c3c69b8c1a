"""Refinement of recorded runs: a fence log (docs/validate.md) judged against the design
model step by step -- a clean faulty run validates, a planted bad step is named by its line,
malformed input is a typed error naming the line, and `quiesce validate` says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from quiesce.adapters import FenceLogLine, FenceView, FileFenceLog, configure_logging
from quiesce.cli import main
from quiesce.harness import simulate
from quiesce.models import (
    MAX_FAULTS,
    DesignParams,
    DesignTooLarge,
    JudgingFenceLog,
    LoggedLine,
    MalformedFenceLog,
    StepKind,
    design_size,
    read_fence_logs,
    validate_fence_log,
)
from quiesce.models.refinement._refinement import DesignSteps
from quiesce.protocol import OpId
from quiesce.protocol.machines import FenceOp, FenceState
from quiesce.protocol.wire import Role

CK1, CK2 = OpId(1, 1, 1), OpId(1, 2, 2)
IDLE = FenceView(state=FenceState.IDLE, active=None, high_watermark=None, recorded=())


def _fence(state: FenceState, active: OpId | None, hwm: OpId | None, *recorded: Any) -> FenceView:
    return FenceView(state=state, active=active, high_watermark=hwm, recorded=recorded)


def _line(
    op: str, before: FenceView, after: FenceView, *, who: str = "agent-0", inc: str = "inc-1"
) -> FenceLogLine:
    op_id = after.active or after.high_watermark
    return FenceLogLine(
        participant=who,
        role=Role.AGENT if who.startswith("agent") else Role.POLICY,
        op=op,
        op_id=None if op_id is None else str(op_id),
        incarnation=inc,
        time=0.0,
        before=before,
        after=after,
    )


PREPARING = _fence(FenceState.PREPARING, CK1, None)
PREPARED = _fence(FenceState.PREPARED, CK1, None, (CK1, FenceOp.PREPARE))
COMMITTED = _fence(
    FenceState.COMMITTED_PAUSED, CK1, None, (CK1, FenceOp.COMMIT), (CK1, FenceOp.PREPARE)
)
RETIRED = _fence(FenceState.IDLE, None, CK1, (CK1, FenceOp.RESUME))
CHECKPOINT = [
    _line("begin", IDLE, IDLE),
    _line("prepare", IDLE, PREPARING),  # not ready: an execution still runs
    _line("boundary", PREPARING, PREPARING),
    _line("prepare", PREPARING, PREPARED),
    _line("commit", PREPARED, COMMITTED),
    _line("resume", COMMITTED, RETIRED),
]
"""One checkpoint at one agent, as its host logs it: 6 lines, 4 fence moves."""


def _written(path: Path, *lines: FenceLogLine) -> Path:
    with FileFenceLog(path) as log:
        for line in lines:
            log.record(line)
    return path


@pytest.fixture(autouse=True)
def _quiet_logs() -> None:
    configure_logging("critical")


def test_a_clean_run_with_faults_restarts_and_a_crash_validates(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    result = simulate(
        steps=3, groups_per_step=2, group_size=2, fault_rate=0.2, crash_at_step=2, seed=0,
        fence_log=log,
    )  # fmt: skip
    assert result.verdict == "ok" and result.faults_injected > 0
    refinement = result.refinement
    assert refinement is not None and refinement["ok"] and refinement["unmapped"] is None
    assert refinement["restarts"] > 0 and refinement["moves"] > 0
    # The file says what the run validated online, line for line.
    assert validate_fence_log(read_fence_logs([log])).describe() == refinement


def test_a_checkpoint_maps_step_by_step() -> None:
    lines = [LoggedLine("log", n, line) for n, line in enumerate(CHECKPOINT, 2)]
    verdict = validate_fence_log(lines, max_faults=1)
    assert verdict.ok, verdict.unmapped
    assert (verdict.lines, verdict.moves, verdict.stutters, verdict.unlogged) == (6, 4, 2, 0)
    assert verdict.design == design_size(1) and verdict.design_states > 0


def test_a_lowered_watermark_is_the_first_unmapped_step_with_its_line(tmp_path: Path) -> None:
    lowered = _fence(FenceState.IDLE, None, None)
    log = _written(tmp_path / "bad.jsonl", *CHECKPOINT, _line("resume", RETIRED, lowered))
    verdict = validate_fence_log(read_fence_logs([log]), max_faults=1)
    unmapped = verdict.unmapped
    assert unmapped is not None and not verdict.ok
    assert (unmapped.where, unmapped.line, unmapped.kind) == (str(log), 8, StepKind.REQUEST)
    assert (unmapped.before, unmapped.after) == (RETIRED, lowered)
    assert "which no step of the design does" in unmapped.reason
    assert "line 8: agent-0, resume" in unmapped.explain()


def test_a_run_judged_as_it_logs_names_the_line_its_file_would_have(tmp_path: Path) -> None:
    lowered = _line("resume", RETIRED, _fence(FenceState.IDLE, None, None))
    online = JudgingFenceLog("run.jsonl", max_faults=1)
    for line in (*CHECKPOINT, lowered, CHECKPOINT[0]):
        online.record(line)
    verdict = online.judge.verdict()
    assert verdict.unmapped is not None and verdict.lines == 8  # counted past the first
    log = _written(tmp_path / "run.jsonl", *CHECKPOINT, lowered)
    from_file = validate_fence_log(read_fence_logs([log]), max_faults=1).unmapped
    assert from_file is not None and verdict.unmapped.line == from_file.line == 8


def test_an_unlogged_move_between_lines_is_judged_too(tmp_path: Path) -> None:
    # The next line starts from a fence whose watermark went back: nothing logged it,
    # and no design step does it.
    forgotten = _fence(FenceState.IDLE, None, None)
    after_restart = _line("status", forgotten, forgotten, inc="inc-2")
    log = _written(tmp_path / "gap.jsonl", *CHECKPOINT, after_restart)
    verdict = validate_fence_log(read_fence_logs([log]), max_faults=1)
    assert verdict.unmapped is not None and verdict.unmapped.kind is StepKind.UNLOGGED
    assert (verdict.unmapped.line, verdict.restarts) == (8, 1)
    # A request whose line died with its process (prepare ready at once) is a design move.
    skipped = [CHECKPOINT[0], _line("commit", PREPARED, COMMITTED)]
    lines = [LoggedLine("log", n, line) for n, line in enumerate(skipped, 2)]
    verdict = validate_fence_log(lines, max_faults=1)
    assert verdict.ok and verdict.unlogged == 1


def test_a_log_must_start_at_the_first_start() -> None:
    lines = [LoggedLine("log", 2, _line("commit", PREPARED, COMMITTED))]
    verdict = validate_fence_log(lines, max_faults=1)
    assert verdict.unmapped is not None and verdict.unmapped.kind is StepKind.START
    assert "no initial fence of the design" in verdict.unmapped.reason


def test_a_busy_policy_is_judged_by_the_fence_table_not_the_designs_idle_policy() -> None:
    """The design's policy is never busy at a prepare (a turn is atomic there); a real one
    is, and answers not_ready: its fence holds `preparing` like the design's agent."""
    busy = [_line("prepare", IDLE, PREPARING, who="policy-0")]
    verdict = validate_fence_log([LoggedLine("log", 2, busy[0])], max_faults=1)
    assert verdict.ok


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        (b"", 1, "the file is empty"),
        (b'{"participant": "x"}\n', 1, "no header line"),
        (b'{"format": "quiesce-fence-log", "version": 2}\n', 1, "format version 2"),
        (b'{"format": "other", "version": 1}\n', 1, "format: Input should be"),
        (b'{"format": "quiesce-fence-log", "version": 1}\n{"op": \n', 2, "not JSON"),
        (b'{"format": "quiesce-fence-log", "version": 1}\n[1]\n', 2, "a JSON list"),
        (b'{"format": "quiesce-fence-log", "version": 1}\n\xff\n', 2, "not UTF-8"),
        (b'{"format": "quiesce-fence-log", "version": 1}\n{"participant": 3}\n', 2, "participant"),
    ],
)
def test_a_malformed_log_is_a_typed_error_naming_the_line(
    tmp_path: Path, content: bytes, line: int, problem: str
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_bytes(content)
    with pytest.raises(MalformedFenceLog) as caught:
        list(read_fence_logs([log]))
    assert (caught.value.where, caught.value.line) == (str(log), line)
    assert problem in caught.value.problem and f"line {line}:" in str(caught.value)


def test_a_bad_op_id_in_a_fence_and_a_changed_role_are_malformed(tmp_path: Path) -> None:
    document = json.loads(CHECKPOINT[1].model_dump_json())
    document["after"]["active"] = "ck-one"
    log = tmp_path / "log.jsonl"
    _written(log, CHECKPOINT[0])
    with log.open("a") as file:
        file.write(json.dumps(document) + "\n")
    with pytest.raises(MalformedFenceLog) as caught:
        list(read_fence_logs([log]))
    assert caught.value.line == 3 and caught.value.problem.startswith("after.active")
    as_policy = CHECKPOINT[1].model_copy(update={"role": Role.POLICY})
    lines = [LoggedLine("log", 2, CHECKPOINT[0]), LoggedLine("log", 3, as_policy)]
    with pytest.raises(MalformedFenceLog, match="line 3: participant 'agent-0' is a policy"):
        validate_fence_log(lines, max_faults=1)


def test_a_budget_beyond_what_is_exhausted_is_refused_naming_it() -> None:
    with pytest.raises(DesignTooLarge, match=f"fault budget {MAX_FAULTS + 1} is too large"):
        validate_fence_log([], max_faults=MAX_FAULTS + 1)


def test_the_validate_command(tmp_path: Path) -> None:
    good = _written(tmp_path / "good.jsonl", *CHECKPOINT)
    ran = CliRunner().invoke(main, ["validate", str(good), "--max-faults", "1"])
    assert ran.exit_code == 0, ran.output
    assert ran.stdout.startswith("OK") and "6 lines of 1 participants: 4 fence moves" in ran.stdout
    lowered = _line("resume", RETIRED, _fence(FenceState.IDLE, None, None))
    bad = _written(tmp_path / "bad.jsonl", *CHECKPOINT, lowered)
    ran = CliRunner().invoke(main, ["validate", str(bad), "--max-faults", "1", "--json"])
    assert ran.exit_code == 1, ran.output
    document = json.loads(ran.stdout)
    assert document["ok"] is False and document["unmapped"]["line"] == 8
    assert document["unmapped"]["before"]["high_watermark"] == str(CK1)
    ran = CliRunner().invoke(main, ["validate", str(bad), "--max-faults", "1"])
    assert ran.exit_code == 1 and ran.stdout.startswith(f"UNMAPPED: {bad} line 8")
    assert "before: " in ran.stdout and "after: " in ran.stdout
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"format": "quiesce-fence-log", "version": 1}\nnot json\n')
    ran = CliRunner().invoke(main, ["validate", str(good), str(broken)])
    assert ran.exit_code == 2 and "Traceback" not in ran.output
    assert ran.stderr.startswith(f"error: {broken} line 2: not JSON")
    ran = CliRunner().invoke(main, ["validate", str(good), "--max-faults", str(MAX_FAULTS + 1)])
    assert ran.exit_code == 2 and "--max-faults" in ran.stderr


def test_simulate_writes_a_log_that_validate_accepts(tmp_path: Path) -> None:
    log = tmp_path / "sim.jsonl"
    log.write_text("an earlier run's log, replaced\n")
    options = ["--steps", "2", "--groups-per-step", "2", "--group-size", "2", "--seed", "4"]
    ran = CliRunner().invoke(main, ["simulate", *options, "--fence-log", str(log), "--json"])
    assert ran.exit_code == 0, ran.output
    refinement = json.loads(ran.stdout)["refinement"]
    assert refinement["ok"] and refinement["lines"] > 0
    checked = CliRunner().invoke(main, ["validate", str(log), "--json"])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout) == refinement
    skipped = CliRunner().invoke(main, ["simulate", *options, "--no-validate", "--json"])
    assert json.loads(skipped.stdout)["refinement"] is None


@pytest.mark.slow
@pytest.mark.timeout(1200)  # about 70 s CPU in all; the wall time grows on a loaded machine
def test_the_design_sizes_validate_uses_are_as_docs_validate_md_says() -> None:
    """The ladder's moves only grow with the budget (the escalation relies on it: a step
    judged at a smaller budget still maps at a larger one), with the counts the docs quote,
    and §8's full reference size makes no fence move the small size at budget 1 misses."""
    ladder = [DesignSteps(design_size(faults)) for faults in range(1, MAX_FAULTS + 1)]
    assert [len(d.fence_moves) for d in ladder] == [18, 20, 21]
    assert [d.design_states for d in ladder] == [2_888, 19_230, 89_116]
    assert ladder[0].fence_moves <= ladder[1].fence_moves <= ladder[2].fence_moves
    assert DesignSteps(DesignParams()).fence_moves == ladder[0].fence_moves
