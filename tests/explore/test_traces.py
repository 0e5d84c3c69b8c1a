"""Trace files: the shapes `quiesce check --json` writes, replayed on the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from quiesce.check import Violation, build_model
from quiesce.explore import TraceFileError, TraceMismatch, read_trace, replay
from tests.explore.conftest import MUTANT


def check_document(violation: Violation[Any]) -> dict[str, Any]:
    """What `quiesce check two-phase --mutant commit_without_message --json` prints."""
    model = build_model("two-phase", mutant=MUTANT)
    return {
        "model": "two-phase",
        "params": {"rms": 3},
        "mutant": MUTANT,
        "violations": [violation.to_json(model)],
    }


def write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    return path


def test_every_accepted_shape_replays_to_the_same_trace(
    tmp_path: Path, two_phase_violation: Violation[Any]
) -> None:
    model = build_model("two-phase", mutant=MUTANT)
    whole = check_document(two_phase_violation)
    one = whole["violations"][0]
    for document in (whole, one, one["trace"]):
        replayed = read_trace(write(tmp_path, document)).replay(model)
        trace = replayed.trace if isinstance(replayed, Violation) else replayed
        assert trace == two_phase_violation.trace
    loaded = read_trace(write(tmp_path, whole))
    assert (loaded.model, loaded.params, loaded.mutant) == ("two-phase", {"rms": 3}, MUTANT)
    assert (loaded.property, loaded.kind) == ("TCConsistent", "always")
    assert read_trace(write(tmp_path, one["trace"])).property is None


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "is not JSON"),
        ('{"violations": []}', "has no violation"),
        ('{"property": "p", "kind": "sometimes", "trace": []}', "unknown violation kind"),
        ('[{"step": 0}]', "holds no list of steps"),
        ("[]", "holds no list of steps"),
    ],
)
def test_a_bad_file_says_what_is_wrong_and_what_is_expected(
    tmp_path: Path, content: str, reason: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(TraceFileError, match=reason) as raised:
        read_trace(path)
    assert "quiesce check --json" in str(raised.value)


def test_a_missing_file_is_a_trace_file_error(tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="cannot be read"):
        read_trace(tmp_path / "absent.json")


def test_a_trace_of_another_size_does_not_replay(two_phase_violation: Violation[Any]) -> None:
    steps = two_phase_violation.to_json(build_model("two-phase"))["trace"]
    with pytest.raises(TraceMismatch, match="at the initial state"):
        replay(build_model("two-phase", {"rms": "2"}), steps)


def test_a_step_the_model_cannot_take_names_it_and_what_is_enabled(
    two_phase_violation: Violation[Any],
) -> None:
    steps = two_phase_violation.to_json(build_model("two-phase"))["trace"]
    # Without the mutant, rm2 cannot receive a Commit nobody sent.
    with pytest.raises(TraceMismatch) as raised:
        replay(build_model("two-phase"), steps)
    assert raised.value.step == 2 and raised.value.action == "RMRcvCommitMsg(rm2)"
    assert "TMAbort" in raised.value.enabled and "RMRcvCommitMsg(rm2)" not in raised.value.enabled
    steps[2]["state"]["msgs"] = ["Commit"]
    with pytest.raises(TraceMismatch, match="a state other than the recorded one"):
        replay(build_model("two-phase", mutant=MUTANT), steps)
