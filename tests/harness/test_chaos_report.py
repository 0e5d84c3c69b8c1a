"""The run report of a chaos run: `quiesce chaos --kills 1 --seed 0 --report` (real processes,
a real SIGKILL, about 15 s) writes one self-contained page.

Its document puts the kill and the victim's restart on the victim's lane, the controller's
phases, admission windows, outcomes and restore on the controller's, and every participant's
fence on its own; the controller's events and the participants' fence logs are stamped by
different processes, and the test checks they line up (a participant's fence moves for an
attempt only after the controller began that attempt, and before it completed). Headless
Chromium draws every kind the run measured, says which it did not, and logs nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quiesce.harness import EVENT_KINDS
from tests.browser import dump_dom, dump_dom_and_console, needs_chromium

LANES = ("controller", "agent-0", "agent-1", "policy-0", "resources-0")
UNMEASURED = {"running", "parked", "frozen", "fault", "crash"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    page = tmp_path_factory.mktemp("chaos-report") / "c.html"
    command = ["chaos", "--kills", "1", "--seed", "0", "--report", str(page), "--json"]
    ran = subprocess.run(
        [sys.executable, "-m", "quiesce", *command],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert f"report: {page}" in ran.stderr
    return page, json.loads(ran.stdout)


def document(page: Path) -> dict[str, Any]:
    found = re.search(r"const REPORT = (\{.*?\});\n", page.read_text(encoding="utf-8"), re.S)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def test_the_kill_and_the_restart_are_on_the_victims_lane(
    run: tuple[Path, dict[str, Any]],
) -> None:
    page, result = run
    doc = document(page)
    assert doc["title"] == "quiesce chaos (seed 0)"
    assert "CLOCK_MONOTONIC" in doc["clock"]
    assert tuple(lane["name"] for lane in doc["lanes"]) == LANES
    assert set(doc["unmeasured"]) == UNMEASURED
    kills = [m for m in doc["marks"] if m["kind"] == "kill"]
    assert len(kills) == result["kills"] == 1
    (kill,) = kills
    victim = kill["lane"]
    assert victim in LANES and kill["tip"]["victim"] == victim
    assert {kill["tip"]["controller_phase"]: 1} == result["kills_by_phase"]
    restarts = [m for m in doc["marks"] if m["kind"] == "restart" and m["lane"] == victim]
    assert len(restarts) == 1 and kill["t"] < restarts[0]["t"] <= doc["end"]
    # Nothing was drawn for what chaos cannot see.
    drawn = {x["kind"] for x in doc["spans"] + doc["marks"]}
    assert not drawn & UNMEASURED
    assert drawn == set(EVENT_KINDS) - UNMEASURED


def test_the_controller_lane_has_its_phases_outcomes_and_restore(
    run: tuple[Path, dict[str, Any]],
) -> None:
    page, result = run
    doc = document(page)
    controller = [s for s in doc["spans"] if s["lane"] == "controller"]
    phases = {s["label"] for s in controller if s["kind"] == "phase"}
    assert {"closing_admission", "preparing", "committing", "publishing"} <= phases
    assert [s["kind"] for s in controller].count("restore") >= 1
    assert any(s["kind"] == "admission" for s in controller)
    completed = [m for m in doc["marks"] if m["kind"] == "outcome" and m["label"] == "completed"]
    assert len(completed) == result["checkpoints_completed"]
    # Charts over steps: one row per trained step, items from trained.log.
    assert [row["step"] for row in doc["steps"]] == list(range(1, result["steps"] + 1))
    assert sum(row["items"] for row in doc["steps"]) == result["steps"] * 2 * 2
    assert sum(row["completed"] for row in doc["steps"]) == result["checkpoints_completed"]
    assert all(row["goodput"] > 0 for row in doc["steps"])


def test_the_fence_logs_line_up_with_the_controllers_clock(
    run: tuple[Path, dict[str, Any]],
) -> None:
    doc = document(run[0])
    began: dict[str, float] = {}
    for span in doc["spans"]:
        if span["kind"] == "phase" and span["tip"].get("checkpoint_id"):
            op = span["tip"]["checkpoint_id"]
            began[op] = min(began.get(op, span["t0"]), span["t0"])
    ended = {
        m["tip"]["checkpoint_id"]: m["t"]
        for m in doc["marks"]
        if m["kind"] == "outcome" and m["label"] == "completed"
    }
    first_move: dict[str, float] = {}
    for span in doc["spans"]:
        if span["kind"] == "fence" and span["tip"].get("op_id") in began:
            op = span["tip"]["op_id"]
            first_move[op] = min(first_move.get(op, span["t0"]), span["t0"])
    assert set(ended) <= set(first_move), "a completed attempt moved no participant's fence"
    for op, at in first_move.items():
        assert began[op] <= at, (op, began[op], at)
        if op in ended:
            assert at <= ended[op], (op, at, ended[op])


@needs_chromium
def test_chromium_draws_the_chaos_run_without_console_messages(
    run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    page, _ = run
    dom, console = dump_dom_and_console(tmp_path / "a", page.as_uri())
    assert console == []
    assert '<body data-rendered="ok">' in dom
    assert re.search(r'<div id="errors">\s*</div>', dom)
    assert tuple(re.findall(r'<g class="lane" data-lane="([^"]+)"', dom)) == LANES
    for kind in EVENT_KINDS:
        shapes = re.findall(rf'<(?:rect|path|circle)[^>]*data-kind="{kind}"', dom)
        legend = re.search(rf'<span data-kind="{kind}"[^>]*>', dom)
        assert legend is not None, kind
        if kind in UNMEASURED:
            assert shapes == [] and 'data-unmeasured="yes"' in legend.group(0), kind
        else:
            assert shapes and "unmeasured" not in legend.group(0), kind
    assert dom.count("executions running / parked / frozen: not measured in chaos") == 2
    assert "CLOCK_MONOTONIC" in dom
    for chart in ("checkpoint", "admission", "attempts", "goodput"):
        assert f'id="chart-{chart}"' in dom


@needs_chromium
def test_hovering_the_kill_shows_the_victim_and_the_phase(
    run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    page, result = run
    dom = dump_dom(tmp_path / "a", page.as_uri() + "#tip=kill")
    tip = re.search(r'<div id="tip"[^>]*data-shown="\d+"[^>]*>(.*?)</div>', dom, re.S)
    assert tip is not None
    (phase,) = result["kills_by_phase"]
    assert "kill: SIGKILL" in tip.group(1) and f"controller_phase: {phase}" in tip.group(1)
