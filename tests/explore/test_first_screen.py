"""The S17 counterexample's first screen, in Chromium at 1400x900 (issue 26, part 3).

A newcomer found the violating edge 2,800 px down, below eight panels. The page now opens
on the violating step: the step's card (what moved, the verdict, the diff) and the first
diagram it moved, with the fired edge, all inside the first 900 px, with no console
error. The check measures bounding boxes in the page itself: a probe script appended to
the saved page writes them into the DOM that `--dump-dom` prints.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from quiesce.cli import main
from tests.browser import chromium, dump_dom_and_console, needs_chromium

pytestmark = needs_chromium
WIDTH, HEIGHT = 1400, 900

# Runs after the page's own script: the boxes of what the first screen must show.
PROBE = """<script>
setTimeout(() => {
  const box = (selector) => {
    const found = document.querySelector(selector);
    if (!found) return null;
    const r = found.getBoundingClientRect();
    return { top: r.top, bottom: r.bottom, left: r.left, right: r.right };
  };
  const measured = {
    viewport: [innerWidth, innerHeight],
    path_step: box("#path li.violation"),
    step: box("#step.violating"),
    changes: box("#changes"),
    fired: box(".instance.moved[open] .fired"),
    scroll_width: document.documentElement.scrollWidth,
    cards: [...document.querySelectorAll(".instance")].map((c) => [c.dataset.instance, c.open]),
    moves: [...document.querySelectorAll("#moves td:first-child")].map((td) => td.textContent),
    path: [...document.querySelectorAll("#path li")].map((li) => li.textContent),
  };
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify(measured);
  document.body.append(out);
}, 100);
</script>"""


def test_the_violating_step_and_its_diff_are_on_the_first_screen(tmp_path: Path) -> None:
    page = tmp_path / "s17.html"
    ran = CliRunner().invoke(
        main, ["explore", "--mutant", "S17_retire_releases_completed", "--html", str(page)]
    )
    assert ran.exit_code == 0, ran.output
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom, console = dump_dom_and_console(
        tmp_path / "a", probed.as_uri(), f"--window-size={WIDTH},{HEIGHT}"
    )
    assert console == []
    found = re.search(r'<pre id="measured">([^<]*)</pre>', dom)
    assert found is not None, "the probe did not run"
    measured = json.loads(found.group(1).replace("&quot;", '"'))
    # Headless Chromium's --dump-dom keeps room for a toolbar: the viewport is as wide but
    # shorter. Its height changes no layout here (no vh units, taller content scrolls
    # either way), so page coordinates up to HEIGHT are the first screen at WIDTHxHEIGHT.
    assert measured["viewport"][0] == WIDTH
    # Opened with no #step: on the violating step, every part of it in the first screen.
    for part in ("path_step", "step", "changes", "fired"):
        box = measured[part]
        assert box is not None, part
        assert box["top"] >= 0 and box["bottom"] <= HEIGHT, (part, box)
        assert box["left"] >= 0 and box["right"] <= WIDTH, (part, box)
    assert measured["scroll_width"] <= WIDTH  # the diff wraps: nothing runs off the right
    # Only the tables the step moved are open; the other nine are one line each.
    opened = [name for name, is_open in measured["cards"] if is_open]
    assert opened == [
        "agent_execution[g0-0#0]",
        "agent_execution[g0-0#1]",
        "agent_execution[g0-1#0]",
        "agent_execution[g0-1#1]",
    ]
    # One name per execution: the path's `s0#0` is the moved table's name too.
    assert measured["moves"] == ["s0#0", "s0#1", "s1#0", "s1#1"]
    assert "s0#0 ends turn 1" in measured["path"]
    assert "agent_execution[" not in " ".join(measured["moves"] + measured["path"])
    shot = tmp_path / "explore.png"
    chromium(
        tmp_path / "b", page.as_uri(), f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={shot}"
    )
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000
