"""`quiesce check`: what it says before, during and after a run, and when it is stopped."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from click.testing import CliRunner

from quiesce.check import Progress, build_model
from quiesce.check import check as explore
from quiesce.cli import _check, main
from quiesce.cli._check import PROGRESS_INTERVAL_S, _LiveProgress


def test_check_warns_that_the_reference_size_will_not_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        _check, "explore", lambda model, **kw: explore(model, **{**kw, "max_states": 5})
    )
    ran = CliRunner().invoke(main, ["check", "protocol"])
    assert "will not finish in minutes" in ran.stderr and "--walks N" in ran.stderr
    bounded = CliRunner().invoke(main, ["check", "protocol", "--max-states", "5"])
    assert "will not finish" not in bounded.stderr


# ------------------------------------------------------------------ progress


def test_the_progress_line_is_throttled_by_time_not_by_states(
    capsys: pytest.CaptureFixture[str],
) -> None:
    now = [0.0]
    progress = _LiveProgress(walks=None, clock=lambda: now[0])
    for at, states in ((0.0, 100), (0.5, 200), (0.9, 300), (1.0, 400), (1.5, 500), (2.4, 600)):
        now[0] = at
        progress(Progress(states, 2 * states, 7, at))
    lines = capsys.readouterr().err.splitlines()
    assert PROGRESS_INTERVAL_S == 1.0
    assert [line.split(",")[0] for line in lines] == [
        "check: 100 states",
        "check: 400 states",
        "check: 600 states",
    ]
    assert "queue 7" in lines[-1] and "states/s" in lines[-1]
    assert progress.latest == Progress(600, 1200, 7, 2.4)


def test_the_progress_line_of_walks_counts_walks() -> None:
    line = _LiveProgress(walks=10).describe(Progress(55, 300, 4, 2.0, depth=31))
    assert line == "check: 6/10 walks, 55 distinct states, 300 steps, depth 31, 150 steps/s, 2s"


def test_the_progress_line_of_a_search_shows_its_depth() -> None:
    line = _LiveProgress(walks=None).describe(Progress(400, 900, 12, 2.0, depth=9))
    assert line == "check: 400 states, 900 generated, depth 9, queue 12, 200 states/s, 2s"


def test_the_explorer_reports_the_depth_it_reached() -> None:
    reports: list[Progress] = []
    result = explore(
        build_model("two-phase", {"rms": "3"}), progress=reports.append, progress_every=50
    )
    assert reports and all(r.depth <= result.depth for r in reports)
    assert reports[-1].depth > 0 and reports[0].depth <= reports[-1].depth


def test_check_asks_the_explorer_for_frequent_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def spy(model: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return explore(model, **kwargs)

    monkeypatch.setattr(_check, "explore", spy)
    ran = CliRunner().invoke(main, ["check", "two-phase", "--set", "rms=5"])
    assert ran.exit_code == 0
    assert seen["progress_every"] <= 1_000  # the line is throttled by time, not by count
    first = re.match(r"check: (\d+) states, ", ran.stderr)
    assert first is not None and int(first[1]) < 200  # the first report shows at once


# ------------------------------------------------------------------ the title


def test_the_title_is_one_line_naming_only_what_differs_from_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        _check, "explore", lambda model, **kw: explore(model, **{**kw, "max_states": 5})
    )
    ran = CliRunner().invoke(
        main, ["check", "protocol", "--set", "siblings=3", "--max-states", "5"]
    )
    title = ran.stdout.splitlines()[0]
    assert title == "protocol (siblings=3, 14 other parameters at defaults)"
    two_phase = CliRunner().invoke(main, ["check", "two-phase", "--set", "rms=2"])
    assert two_phase.stdout.splitlines()[0] == "two-phase (rms=2)"


def test_a_title_longer_than_the_terminal_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "30")
    title = _check._title("protocol", {"siblings": 9, "turns": 9, "attempts": 9}, "S2_x")
    assert len(title) == 30 and title.endswith("...") and "\n" not in title


# ------------------------------------------------------------------ unknown mutant


def test_an_unknown_mutant_is_one_short_line_with_the_close_matches() -> None:
    ran = CliRunner().invoke(main, ["check", "--mutant", "S2_boolean_suspnd"])
    assert ran.exit_code == 2 and ran.stdout == ""
    assert ran.stderr.count("\n") == 1 and len(ran.stderr) < 200, ran.stderr
    assert "did you mean S2_boolean_suspend?" in ran.stderr
    listing = "quiesce mutants --model design"
    assert f"`{listing}` lists all 10" in ran.stderr
    # The listing the hint names lists exactly those 10, and says so.
    listed = CliRunner().invoke(main, listing.split()[1:])
    assert listed.exit_code == 0
    assert len(listed.stdout.splitlines()) == 11 and "S2_boolean_suspend " in listed.stdout
    assert listed.stdout.splitlines()[-1].startswith("10 mutants of design")


def test_a_model_with_few_mutants_names_them_all() -> None:
    ran = CliRunner().invoke(main, ["check", "two-phase", "--mutant", "nope"])
    assert ran.exit_code == 2
    assert ran.stderr == (
        "error: no two-phase mutant named 'nope'; known: commit_without_message\n"
    )


# ------------------------------------------------------------------ Ctrl-C and SIGTERM


def _stopped_by(signum: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the search report once, then receive `signum` mid-search."""

    def search(model: Any, *, progress: Any, **kwargs: Any) -> Any:
        progress(Progress(1234, 5678, 90, 1.5))
        try:
            os.kill(os.getpid(), signum)
            time.sleep(10)  # the handler raises here
        except Exception as error:  # as a model does around a mutant's core
            raise AssertionError(f"{error!r} was caught as a failure of the model") from None
        raise AssertionError("the signal did not stop the search")

    monkeypatch.setattr(_check, "explore", search)


def test_sigterm_prints_the_partial_summary_and_exits_143(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    _stopped_by(signal.SIGTERM, monkeypatch)
    ran = CliRunner().invoke(main, ["check", "two-phase"])
    assert ran.exit_code == 143
    assert ran.stdout.startswith("two-phase (1 parameter at defaults): STOPPED by SIGTERM\n")
    assert "1,234" in ran.stdout and "5,678" in ran.stdout and "queue" in ran.stdout
    assert "stopped by SIGTERM after 1,234 states: the search did not finish" in ran.stderr
    assert signal.getsignal(signal.SIGTERM) is before  # handlers are restored


def test_ctrl_c_with_json_prints_a_partial_document_and_exits_130(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _stopped_by(signal.SIGINT, monkeypatch)
    ran = CliRunner().invoke(main, ["check", "two-phase", "--json"])
    assert ran.exit_code == 130
    document = json.loads(ran.stdout)
    assert document["interrupted"] == "SIGINT" and document["complete"] is False
    assert (document["distinct_states"], document["frontier"]) == (1234, 90)
    assert (document["model"], document["mode"], document["params"]) == (
        "two-phase",
        "exhaustive",
        {"rms": 3},
    )


def test_a_real_sigterm_mid_search_prints_what_was_explored() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "quiesce", "check", "--max-states", "10000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:  # wait until the search runs
        if line.startswith("check: ") and " states, " in line:
            break
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert "STOPPED by SIGTERM" in out and "distinct states" in out
    assert "Traceback" not in err
