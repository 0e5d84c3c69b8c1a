"""The page: one self-contained file, with the document embedded as it was built."""

from __future__ import annotations

import json
import re
from typing import Any

from quiesce.check import Violation, build_model
from quiesce.explore import Session, render_page
from tests.explore.conftest import MUTANT


def document(violation: Violation[Any], origin: str = "a check") -> dict[str, Any]:
    model = build_model("two-phase", mutant=MUTANT)
    return Session(model, violation, mutant=MUTANT, origin=origin).document(served=False)


def embedded(html: str) -> Any:
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_the_page_embeds_the_document_and_needs_no_network(
    two_phase_violation: Violation[Any],
) -> None:
    built = document(two_phase_violation)
    html = render_page(built)
    assert embedded(html) == built
    # The only URL is the SVG namespace: no CDN, no stylesheet, no script to fetch.
    assert set(re.findall(r"https?://[\w./-]+", html)) == {"http://www.w3.org/2000/svg"}
    assert "<link" not in html and "src=" not in html and "@import" not in html
    assert "function render()" in html  # page.js inlined
    assert f"<title>quiesce explore: two-phase [{MUTANT}]</title>" in html


def test_text_from_the_model_cannot_end_the_data_script(
    two_phase_violation: Violation[Any],
) -> None:
    built = document(two_phase_violation, origin="</script><script>alert(1)</script><!--")
    html = render_page(built)
    assert html.count("</script>") == 2  # the data's and the code's own
    assert embedded(html)["origin"] == built["origin"]
