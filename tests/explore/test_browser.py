"""The page in a real browser: headless Chromium, served by the real command and saved.

Chromium runs the page's script and `--dump-dom` prints the DOM it built; the URL
fragment drives it (`#step=N` moves the cursor, `#path=...` takes steps by hand through
the server). `--virtual-time-budget` lets the hand steps' requests finish before the dump.
Skipped only when no Chromium is installed (CI installs it: see .ci/run); the helpers are
tests/browser.py's, shared with the run report's test.
"""

from __future__ import annotations

import re
import selectors
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from quiesce.check import Violation, build_model
from quiesce.cli import main
from quiesce.explore import Session
from tests.browser import chromium, dump_dom, needs_chromium
from tests.explore.conftest import MUTANT

pytestmark = needs_chromium
EXPLORE = [sys.executable, "-m", "quiesce", "explore", "two-phase", "--mutant", MUTANT]


def current(dom: str, instance: str) -> str | None:
    """The state highlighted in `instance`'s diagram."""
    card = re.split(f'<details class="instance[^"]*" data-instance="{re.escape(instance)}"', dom)[1]
    card = card.split('<details class="instance', 1)[0]
    found = re.search(r'<g class="node current" data-state="([^"]+)"', card)
    return None if found is None else found.group(1)


def text_of(dom: str, pattern: str) -> str:
    found = re.search(pattern, dom)
    assert found is not None, pattern
    return found.group(1)


def assert_at_the_violation(dom: str) -> None:
    """Step 2 of the counterexample: rm2 committed while rm1 aborted, TCConsistent broken."""
    assert text_of(dom, r'<span id="position">([^<]*)') == "step 2 / 2"
    # The step's card says it, so the banner is hidden there.
    assert re.search(r'<div id="banner"[^>]* hidden', dom)
    assert text_of(dom, r'(?s)<section id="step" class="violating">.*?<p id="verdict">([^<]*)') == (
        "TCConsistent violated by this step: no RM has committed while another has aborted"
    )
    assert text_of(dom, r'<li class="([^"]*)" data-property="TCConsistent"') == "fails violated"
    assert text_of(dom, r'<li class="([^"]*)" data-property="TypeOK"') == "holds"
    assert (current(dom, "rm1"), current(dom, "rm2"), current(dom, "tm")) == (
        "aborted",
        "committed",
        "init",
    )
    assert text_of(dom, r'<li class="current violation">([^<]*)') == "RMRcvCommitMsg(rm2)"
    assert "<td>rmState.rm2</td>" in dom


@pytest.fixture
def served() -> Iterator[str]:
    """The URL `quiesce explore` prints, the server stopped after the test."""
    process = subprocess.Popen(EXPLORE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=60), "quiesce explore printed no URL in 60 s"
        url = process.stdout.readline().decode().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url), url
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_served_page_steps_to_the_violation_and_by_hand_past_it(
    served: str, tmp_path: Path, two_phase_violation: Violation[Any]
) -> None:
    assert_at_the_violation(dump_dom(tmp_path / "a", served + "#step=2"))
    before = dump_dom(tmp_path / "b", served + "#step=1")
    assert text_of(before, r'<li class="([^"]*)" data-property="TCConsistent"') == "holds"
    assert text_of(before, r'<div id="banner" class="">([^<]*)') == (
        "TCConsistent violated (always) at step 2"
    )
    assert current(before, "rm2") == "working"
    # By hand: the counterexample's two steps, then TMAbort, which only the server knows.
    session = Session(build_model("two-phase", mutant=MUTANT), two_phase_violation)
    frames = session.document(served=True)["frames"]
    tm_abort = [a["label"] for a in frames[2]["actions"]].index("TMAbort")
    path = ".".join(map(str, [frames[1]["via"], frames[2]["via"], tm_abort]))
    stepped = dump_dom(tmp_path / "c", f"{served}#path={path}&step=3")
    assert text_of(stepped, r'<span id="position">([^<]*)') == "step 3 / 3"
    assert text_of(stepped, r'<li class="current">([^<]*)') == "TMAbort"
    assert current(stepped, "tm") == "aborted"
    assert '<g class="edge fired covered"' in stepped  # TMAbort's edge in tm's diagram


def test_the_saved_page_steps_to_the_violation_offline(tmp_path: Path) -> None:
    page = tmp_path / "out.html"
    ran = CliRunner().invoke(
        main, ["explore", "two-phase", "--mutant", MUTANT, "--html", str(page)]
    )
    assert ran.exit_code == 0, ran.output
    assert_at_the_violation(dump_dom(tmp_path / "a", f"{page.as_uri()}#step=2"))
    shot = tmp_path / "explore.png"
    chromium(
        tmp_path / "b", f"{page.as_uri()}#step=2", "--window-size=1280,900", f"--screenshot={shot}"
    )
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000
