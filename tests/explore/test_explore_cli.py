"""`quiesce explore --html`: the model, the path's origin, and the errors it reports."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from quiesce.check import Violation, build_model
from quiesce.cli import main
from tests.explore.conftest import MUTANT


def page_data(path: Path) -> Any:
    html = path.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_html_with_a_mutant_opens_its_counterexample(tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    ran = CliRunner().invoke(main, ["explore", "two-phase", "--mutant", MUTANT, "--html", str(out)])
    assert ran.exit_code == 0, ran.output
    assert ran.stdout.strip() == str(out)
    data = page_data(out)
    assert data["violation"]["property"] == "TCConsistent" and len(data["frames"]) == 3
    assert data["origin"] == "counterexample found by a full check"


def test_the_default_design_model_draws_its_tables_along_the_s17_walk(tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    args = ["explore", "--mutant", "S17_retire_releases_completed", "--walks", "200"]
    ran = CliRunner().invoke(main, [*args, "--html", str(out)])
    assert ran.exit_code == 0, ran.output
    data = page_data(out)
    assert data["model"] == "design[S17_retire_releases_completed]"
    assert data["violation"]["property"] == "I1"
    last = data["frames"][-1]
    assert last["action"] == "the group's deadline expires"
    # The violating step fires S17's own row of the retired execution, which ends it.
    assert "agent_execution[g0-0#0]" in last["fired"]
    assert last["controls"]["agent_execution[g0-0#0]"] == "tombstoned"
    assert data["frames"][-2]["controls"]["agent_execution[g0-0#0]"] == "completed"


def test_walks_that_find_nothing_open_the_initial_state(tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    args = ["explore", "two-phase", "--set", "rms=1", "--walks", "3", "--html", str(out)]
    ran = CliRunner().invoke(main, args)
    assert ran.exit_code == 0 and "found no violation" in ran.stderr
    data = page_data(out)
    assert data["violation"] is None and len(data["frames"]) == 1
    assert data["params"] == {"rms": 1}


def test_a_check_json_file_brings_its_model_size_and_mutant(
    tmp_path: Path, two_phase_violation: Violation[Any]
) -> None:
    model = build_model("two-phase", mutant=MUTANT)
    document = {
        "model": "two-phase",
        "params": {"rms": 3},
        "mutant": MUTANT,
        "violations": [two_phase_violation.to_json(model)],
    }
    trace = tmp_path / "cex.json"
    trace.write_text(json.dumps(document))
    out = tmp_path / "page.html"
    ran = CliRunner().invoke(main, ["explore", "--trace", str(trace), "--html", str(out)])
    assert ran.exit_code == 0, ran.output
    data = page_data(out)
    assert (data["model"], data["mutant"]) == ("two-phase", MUTANT)
    assert data["violation"]["step"] == 2 and data["origin"] == f"the trace in {trace}"


def test_errors_exit_2_naming_the_problem(tmp_path: Path) -> None:
    runner = CliRunner()
    unknown = runner.invoke(main, ["explore", "two-phase", "--mutant", "nope"])
    assert unknown.exit_code == 2 and "no mutant 'nope'" in unknown.stderr
    missing = runner.invoke(main, ["explore", "--trace", str(tmp_path / "absent.json")])
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    (tmp_path / "x.json").write_text("[]")
    both = runner.invoke(main, ["explore", "--trace", str(tmp_path / "x.json"), "--walks", "3"])
    assert both.exit_code == 2 and "--trace takes neither" in both.stderr


def test_a_taken_port_is_an_error_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = CliRunner().invoke(main, ["explore", "two-phase", "--port", str(port)])
    assert ran.exit_code == 2 and f"cannot serve on 127.0.0.1:{port}" in ran.stderr
