"""`quiesce check --swarm N [--ray [ADDRESS]]`: what it prints, and how it refuses.

The swarm on a real local Ray is tested in `tests/models/coverage/test_swarm.py` (slow)."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from quiesce.check import Progress
from quiesce.cli import main
from quiesce.cli._check import _LiveProgress

S17 = "S17_retire_releases_completed"


def test_a_swarm_prints_its_merged_result_and_what_it_does_not_prove() -> None:
    ran = CliRunner().invoke(main, ["check", "design", "--swarm", "3", "--walks", "2"])
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.startswith("design (14 parameters at defaults), swarm\n")
    for measure in ("walkers", "distinct states (estimate)", "table rows fired", "states/s per"):
        assert measure in ran.stdout
    assert "I1: no violation seen" in ran.stdout and "I9: no violation seen" in ran.stdout
    assert "a swarm of 3 walkers (seed 0)" in ran.stderr and "not a proof" in ran.stderr


def test_a_swarm_finds_a_mutant_and_reports_it_as_json() -> None:
    args = ["check", "protocol", "--mutant", S17, "--swarm", "4", "--walks", "3"]
    ran = CliRunner().invoke(main, [*args, "--max-depth", "200", "--json"])
    assert ran.exit_code == 1, ran.stderr
    document = json.loads(ran.stdout)
    assert document["mode"] == "swarm" and document["mutant"] == S17
    assert [v["property"] for v in document["violations"]] == ["I1"]
    section = document["swarm"]
    assert section["walkers"] == 4 and section["walks_per_walker"] == 3
    rows = section["rows"]
    assert 0 < rows["fired"] < rows["tracked"] and rows["dead_by_design"]
    assert section["states_per_s_per_walker"] > 0 and not document["complete"]


def test_the_progress_line_of_a_swarm_counts_walkers() -> None:
    line = _LiveProgress(10, unit="walkers").describe(Progress(55, 300, 4, 2.0, depth=31))
    assert line.startswith("check: 6/10 walkers, 55 distinct states, 300 steps")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ray"], "--ray, --wave and --bitstate-bits shape a swarm: add --swarm N"),
        (["--bitstate-bits", "20"], "--ray, --wave and --bitstate-bits shape a swarm"),
        (["--wave", "4"], "--ray, --wave and --bitstate-bits shape a swarm"),
        (["--swarm", "2", "--refine"], "--swarm takes no --refine"),
        (["--swarm", "2", "--symmetry"], "--walks and --swarm take neither --symmetry"),
        (["--swarm", "2", "--bitstate-bits", "40"], "40 is not in the range 10<=x<=36"),
    ],
)
def test_options_a_swarm_cannot_take_are_usage_errors(args: list[str], message: str) -> None:
    ran = CliRunner().invoke(main, ["check", "two-phase", *args])
    assert ran.exit_code == 2 and message in ran.stderr


def test_a_missing_ray_is_a_one_line_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails
    ran = CliRunner().invoke(main, ["check", "two-phase", "--swarm", "2", "--ray"])
    assert ran.exit_code == 2
    assert ran.stderr.strip().splitlines() == [
        "error: --ray: ray is not installed: install the extra with `uv sync --extra ray`"
    ]


@pytest.mark.parametrize(
    "address, why",
    [
        ("127.0.0.1:1", "nothing answers at 127.0.0.1:1"),
        ("ray://127.0.0.1:1", "nothing answers at 127.0.0.1:1"),
        ("no-port-here", "expected HOST:PORT"),
    ],
)
def test_a_bad_ray_address_is_a_one_line_error(address: str, why: str) -> None:
    pytest.importorskip("ray", reason="the swarm on Ray needs the `quiesce[ray]` extra")
    ran = CliRunner().invoke(main, ["check", "two-phase", "--swarm", "2", "--ray", address])
    assert ran.exit_code == 2
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --ray {address}: {why}")
