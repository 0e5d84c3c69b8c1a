"""A run report: one self-contained HTML page of a recorded run (`quiesce simulate --report`,
`quiesce chaos --report`).

The page is `report.html` (markup and CSS) with `report.js` and the recorder's document
(JSON) inlined: no network, no server, no CDN. It draws a Jepsen-style timeline -- one lane
for the controller (checkpoint phases, admission-closed windows, attempt outcomes, the
restore and what it redispatched, the crash) and one per participant (its fence while not
idle, executions running / parked / frozen, injected faults, kills and restarts) -- and
charts over training steps (checkpoint seconds, admission closed, attempts by outcome and
cause, goodput). What a run could not measure (the document's `unmeasured`) is listed as
such, never drawn; the document's `clock` says which clock its seconds are on. Hovering
shows an event's details; `#tip=KIND` shows the first event of a kind, `#step=N` zooms to a
training step, `#t0=..&t1=..` to a time window.
"""

from __future__ import annotations

import json
from html import escape
from importlib.resources import files
from pathlib import Path
from string import Template
from typing import Any

from quiesce.harness._recorder import RunRecorder

__all__ = ["render_report", "write_report"]


def render_report(document: dict[str, Any]) -> str:
    """The HTML page of `document` (`RunRecorder.document()`)."""
    package = files("quiesce.harness")
    template = Template(package.joinpath("report.html").read_text(encoding="utf-8"))
    # Inside <script>, `</script>` or `<!--` in a value would end the element: no `<` is left.
    data = json.dumps(document, separators=(",", ":")).replace("<", "\\u003c")
    return template.substitute(
        title=escape(str(document.get("title", "quiesce run report"))),
        data=data,
        script=package.joinpath("report.js").read_text(encoding="utf-8"),
    )


def write_report(path: Path, recorder: RunRecorder) -> None:
    """Write `recorder`'s run (a `RunRecorder` or a `ChaosRecorder`) as one HTML page at
    `path` (replaced)."""
    path.write_text(render_report(recorder.document()), encoding="utf-8")
