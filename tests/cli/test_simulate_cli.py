"""`quiesce simulate` through click's runner."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from quiesce.cli import main

KEYS = {
    "steps",
    "checkpoints",
    "rollouts",
    "admission_closed_s",
    "invariants_ok",
    "stopped",
    "stop_reason",
}


def test_defaults_exit_0_with_a_summary_table() -> None:
    result = CliRunner().invoke(main, ["simulate"])
    assert result.exit_code == 0, result.output
    assert "invariants" in result.stdout and "ok" in result.stdout
    assert "lost / duplicated" in result.stdout


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
    assert (tmp_path / "snapshots" / "published").is_dir()
    again = CliRunner().invoke(main, args[:-2])
    assert json.loads(again.stdout) == document  # same seed, same JSON (another directory)


def test_a_bad_option_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["simulate", "--fault-rate", "1.5"])
    assert result.exit_code == 2
    result = CliRunner().invoke(main, ["simulate", "--target-level", "episode"])
    assert result.exit_code == 2
