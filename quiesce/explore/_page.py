"""The explorer as one self-contained HTML page: the template, the script, the data.

The page is the same served or saved: `page.html` (markup and CSS) with `page.js` and the
session's document (JSON) inlined, so a saved file opens with no network and no server.
"""

from __future__ import annotations

import json
from html import escape
from importlib.resources import files
from string import Template
from typing import Any

__all__ = ["render_page"]


def render_page(document: dict[str, Any]) -> str:
    """The HTML page showing `document` (`Session.document`)."""
    package = files("quiesce.explore")
    template = Template(package.joinpath("page.html").read_text(encoding="utf-8"))
    # Inside <script>, `</script>` or `<!--` in a value would end or upset the element; JSON
    # may spell `<` as \u003c, so no `<` is left in the data at all.
    data = json.dumps(document, separators=(",", ":")).replace("<", "\\u003c")
    return template.substitute(
        title=escape(document["title"]),
        data=data,
        script=package.joinpath("page.js").read_text(encoding="utf-8"),
    )
