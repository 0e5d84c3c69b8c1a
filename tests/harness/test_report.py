"""The run report: `quiesce simulate --report` writes one self-contained page, and headless
Chromium draws every lane and every event kind of the acceptance run from it, with no
console message at all; hovering (here `#tip=KIND`, the same handler) shows an event's
details. A bad `--report` path is a one-line usage error, for `quiesce chaos` too (its run
report is tested in `test_chaos_report.py`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from quiesce.cli import main
from quiesce.harness import EVENT_KINDS
from tests.browser import chromium, dump_dom, dump_dom_and_console, needs_chromium

ACCEPTANCE = ["simulate", "--fault-rate", "0.05", "--crash-at-step", "4", "--seed", "0"]
LANES = ("controller", "agent-0", "agent-1", "policy-0", "resources-0")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    page = tmp_path_factory.mktemp("report") / "r.html"
    ran = CliRunner().invoke(main, [*ACCEPTANCE, "--report", str(page), "--json"])
    assert ran.exit_code == 0, ran.output
    return page


def test_the_page_is_self_contained(report: Path) -> None:
    html = report.read_text(encoding="utf-8")
    # No external resource of any kind: no src/href to a URL, no stylesheet link, no import.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html and "fetch(" not in html
    assert html.count("<script>") == 2 and "const REPORT = {" in html


@needs_chromium
def test_chromium_draws_every_lane_and_event_kind_without_console_messages(
    report: Path, tmp_path: Path
) -> None:
    dom, console = dump_dom_and_console(tmp_path / "a", report.as_uri())
    assert console == []
    assert '<body data-rendered="ok">' in dom
    assert re.search(r'<div id="errors">\s*</div>', dom)
    drawn = re.findall(r'<g class="lane" data-lane="([^"]+)"', dom)
    assert tuple(drawn) == LANES
    # Every kind is drawn as a shape, not only named in the legend, but a kill: simulate
    # kills no process, and its legend says so.
    for kind in EVENT_KINDS:
        shapes = re.findall(rf'<(?:rect|path|circle)[^>]*data-kind="{kind}"', dom)
        assert bool(shapes) is (kind != "kill"), kind
    assert re.search(r'<span data-kind="kill" class="unmeasured" data-unmeasured="yes"', dom)
    # Charts over training steps: one bar group per step of the run, in each of the four.
    for chart in ("checkpoint", "admission", "attempts", "goodput"):
        assert f'id="chart-{chart}"' in dom
    assert 'data-step="8"' in dom and "participant_restarted" in dom


@needs_chromium
def test_hovering_the_restore_shows_what_it_redispatched(report: Path, tmp_path: Path) -> None:
    dom = dump_dom(tmp_path / "a", report.as_uri() + "#tip=restore.1")
    tip = re.search(r'<div id="tip"[^>]*data-shown="\d+"[^>]*>(.*?)</div>', dom, re.S)
    assert tip is not None
    text = tip.group(1)
    assert "restore: snapshot" in text and "snapshot: ck-1-4-step4" in text
    assert "siblings_resumed_from_turn: 10" in text and "from turn" in text


@needs_chromium
def test_a_screenshot_is_legible_size(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    chromium(
        tmp_path / "a",
        report.as_uri() + "#tip=restore.1",
        "--window-size=1400,900",
        f"--screenshot={shot}",
    )
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 30_000


@pytest.mark.parametrize("command", [["simulate", "--steps", "1"], ["chaos", "--kills", "0"]])
@pytest.mark.parametrize("where", ["missing/r.html", "."])
def test_a_bad_report_path_is_one_usage_error(
    tmp_path: Path, where: str, command: list[str]
) -> None:
    # Refused before anything runs (chaos starts no process).
    ran = CliRunner().invoke(main, [*command, "--report", str(tmp_path / where)])
    assert ran.exit_code == 2
    errors = [line for line in ran.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "--report" in errors[0]
    assert "Traceback" not in ran.output
