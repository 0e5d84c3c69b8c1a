"""`quiesce simulate` through click's runner: the summary, the JSON, and exit codes that
tell the truth (0 ok, 1 an invariant violated, 2 a usage error, 3 the controller stopped)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import quiesce.cli._simulate as simulate_command
from quiesce.cli import main
from quiesce.harness import simulate
from tests.harness.test_simulate import ForgetsACompletion, run_with_a_failing_agent

KEYS = {
    "steps",
    "checkpoints",
    "rollouts",
    "admission_closed_s",
    "invariants_ok",
    "stopped",
    "stop_reason",
    "stop",
    "untrained",
    "verdict",
}


def test_defaults_exit_0_with_a_summary_table() -> None:
    result = CliRunner().invoke(main, ["simulate"])
    assert result.exit_code == 0, result.output
    assert "invariants" in result.stdout and "ok" in result.stdout
    assert "lost / duplicated" in result.stdout
    assert "untrained prompt groups" in result.stdout and "ok (exit 0)" in result.stdout
    below = result.stdout.splitlines()
    assert not [line for line in below if line.startswith(("untrained ", "stopped at step"))]


def test_json_prints_one_document_with_every_key(tmp_path: Path) -> None:
    args = [
        "simulate",
        "--json",
        "--steps",
        "3",
        "--groups-per-step",
        "2",
        "--group-size",
        "2",
        "--crash-at-step",
        "2",
        "--fault-rate",
        "0.02",
        "--seed",
        "4",
        "--snapshot-dir",
        str(tmp_path),
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document) >= KEYS
    assert set(document["checkpoints"]) >= {
        "completed",
        "skipped",
        "failed",
        "aborted",
        "release_retried",
        "abort_retried",
    }
    assert set(document["rollouts"]) >= {
        "dispatched",
        "completed",
        "trained",
        "lost",
        "duplicated",
        "redispatched",
        "resumed_from_turn",
        "rerun_from_scratch",
    }
    assert set(document["admission_closed_s"]) == {"median", "max"}
    assert document["invariants_ok"] is True
    assert document["untrained"] == {"count": 0, "groups": []}
    assert (document["verdict"], document["stop"]) == ("ok", None)
    assert (tmp_path / "snapshots" / "published").is_dir()
    again = CliRunner().invoke(main, args[:-2])
    assert json.loads(again.stdout) == document  # same seed, same JSON (another directory)


def test_latency_and_checkpointing_reach_the_run() -> None:
    small = ["simulate", "--json", "--steps", "2", "--groups-per-step", "2", "--group-size", "2"]
    review = CliRunner().invoke(main, [*small, "--latency", "review"])
    assert review.exit_code == 0, review.output
    document = json.loads(review.stdout)
    assert document["checkpoints"]["completed"] == 2
    # Training steps of two minutes, each ending with the trainer's 30 s checkpoint write.
    assert document["virtual_seconds"] >= 2 * (120.0 + 30.0)
    off = CliRunner().invoke(main, [*small, "--latency", "review", "--no-checkpointing"])
    assert off.exit_code == 0, off.output
    # The trainer saves its own checkpoint with participant checkpointing off too.
    assert json.loads(off.stdout)["virtual_seconds"] >= 2 * (120.0 + 30.0)
    counts = json.loads(off.stdout)["checkpoints"]
    assert (counts["completed"], counts["skipped"], counts["failed"]) == (0, 0, 0)
    assert json.loads(off.stdout)["rollouts"]["trained"] == document["rollouts"]["trained"]


def test_a_bad_option_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["simulate", "--target-level", "episode"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--steps", "4", "--crash-at-step", "9"],
            "error: --crash-at-step 9 is beyond --steps 4: crash at a step from 1 to 4",
        ),
        (["--steps", "-1"], "Error: Invalid value for '--steps': -1 is not in the range 1<=x"),
        (["--steps", "-1", "--crash-at-step", "2"], "Error: Invalid value for '--steps': -1"),
        (["--steps", "99999"], "Error: Invalid value for '--steps': 99999 is not in the range"),
        (["--fault-rate", "1.5"], "Error: Invalid value for '--fault-rate': 1.5 is not in the"),
        (["--fault-rate", "-0.1"], "Error: Invalid value for '--fault-rate': -0.1 is not in"),
        (["--fault-rate", "nan"], "Error: Invalid value for '--fault-rate': nan is not a finite"),
        (["--crash-at-step", "0"], "Error: Invalid value for '--crash-at-step': 0 is not in"),
        (["--resources", "-1"], "Error: Invalid value for '--resources': -1 is not in the range"),
        (["--group-size", "0"], "Error: Invalid value for '--group-size': 0 is not in the range"),
        (
            ["--no-checkpointing", "--crash-at-step", "2"],
            "error: --crash-at-step needs checkpointing: the controller crashes right after",
        ),
        (["--latency", "slow"], "Error: Invalid value for '--latency': 'slow' is not one of"),
    ],
)
def test_a_bad_number_is_refused_with_one_error_line(args: list[str], line: str) -> None:
    # Bounded at both ends by click's range types, like every command's numbers (a huge
    # size would start a run that never ends): one error line after click's usage lines.
    result = CliRunner().invoke(main, ["simulate", *args])
    assert result.exit_code == 2
    assert result.stdout == ""
    errors = [text for text in result.stderr.splitlines() if text.lower().startswith("error")]
    assert len(errors) == 1 and errors[0].startswith(line), result.stderr


def test_a_planted_dropped_completion_exits_1_naming_the_untrained_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dropped: list[str] = []
    planted = functools.partial(ForgetsACompletion, dropped=dropped)
    monkeypatch.setattr(
        simulate_command, "run", functools.partial(simulate, coordinator_factory=planted)
    )
    result = CliRunner().invoke(
        main, ["simulate", "--steps", "3", "--groups-per-step", "2", "--group-size", "2"]
    )
    assert result.exit_code == 1, result.output
    group = dropped[0].rpartition("/")[0]
    assert f"untrained {group} (in_flight): in flight when the controller stopped" in result.stdout
    assert "VIOLATED" in result.stdout and "violated (exit 1)" in result.stdout
    assert "violation: I9: no fault was injected, yet" in result.stderr
    assert group in result.stderr


@pytest.mark.parametrize("as_json", [False, True])
def test_a_stopped_run_exits_3_and_says_why(monkeypatch: pytest.MonkeyPatch, as_json: bool) -> None:
    monkeypatch.setattr(simulate_command, "run", run_with_a_failing_agent)
    result = CliRunner().invoke(main, ["simulate", "--seed", "1", *(["--json"] if as_json else [])])
    assert result.exit_code == 3, result.output
    if as_json:
        document = json.loads(result.stdout)
        assert (document["verdict"], document["invariants_ok"]) == ("stopped", True)
        assert document["stop"]["participants"] == ["agent-1"]
        assert document["stop"]["reason"] == document["stop_reason"]
        return
    assert "stopped (exit 3)" in result.stdout
    [why] = [line for line in result.stdout.splitlines() if line.startswith("stopped at step")]
    assert re.fullmatch(
        r"stopped at step \d of 8: max_consecutive_failures after \d+ consecutive failures; "
        r"the last checkpoint, ck-\S+, failed on participant_error at agent-1 \(prepare\)",
        why,
    ), why


def test_the_summary_names_the_restored_snapshot_and_a_late_crash() -> None:
    # With participant restarts the first checkpoint at step 4 or after with rollouts in
    # flight is at step 6: the table shows both, and a line says why.
    args = ["simulate", "--restart-rate", "0.05", "--crash-at-step", "4"]
    ran = CliRunner().invoke(main, args)
    document = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    crashed = document["crashed_at_step"]
    assert crashed is not None and crashed > 4
    assert f"{crashed} (asked: at or after 4)" in ran.stdout
    assert f"crash: at step {crashed}: the controller crashes after the first checkpoint" in (
        ran.stdout
    )
    [restore] = document["restores"]
    assert f"restore: from snapshot {restore['snapshot_id']}, " in ran.stdout


def test_a_crash_on_time_shows_only_its_step() -> None:
    ran = CliRunner().invoke(main, ["simulate", "--crash-at-step", "4"])
    assert re.search(r"controller crash at step\s+│\s+4 │", ran.stdout), ran.stdout
    assert "asked" not in ran.stdout and "restore: from snapshot ck-" in ran.stdout


def test_inject_and_coverage_report_the_scenarios_reached() -> None:
    args = ["simulate", "--steps", "4", "--groups-per-step", "2", "--group-size", "2"]
    result = CliRunner().invoke(main, [*args, "--inject", "conflict", "--coverage"])
    assert result.exit_code == 0, result.output
    assert "scenario S5:" in result.stdout and "scenarios reached:" in result.stdout
    plain = CliRunner().invoke(main, [*args, "--json"])
    assert "coverage" not in json.loads(plain.stdout)  # the document is as it always was
    covered = CliRunner().invoke(main, [*args, "--json", "--coverage", "--inject", "conflict"])
    assert "S5" in json.loads(covered.stdout)["coverage"]["scenarios"]
    refused = CliRunner().invoke(main, [*args, "--inject", "conflict", "--no-checkpointing"])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
