"""docs/embedding.md runs: its ```python blocks, in order, in one namespace.

A block fenced ```python no-run (with its reason) is shown, not run; any other fence
that starts with ```python is a mistake this test refuses (a typo would skip a block)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "embedding.md"
_FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
_NO_RUN = re.compile(r"python no-run -- \S.*")


def _blocks(text: str) -> tuple[list[str], list[str]]:
    """The blocks to run and the no-run ones (each of those must give its reason)."""
    run: list[str] = []
    skipped: list[str] = []
    for fence in _FENCE.finditer(text):
        info = fence["info"].strip()
        if info == "python":
            run.append(fence["body"])
        elif info.startswith("python"):
            if not _NO_RUN.fullmatch(info):
                raise AssertionError(f"fence {info!r}: use ```python or ```python no-run -- why")
            skipped.append(fence["body"])
    return run, skipped


def test_the_guide_uses_public_names_only() -> None:
    text = GUIDE.read_text()
    assert not re.search(r"quiesce(\.\w+)*\._", text), "the guide imports a private module"


def test_the_no_run_blocks_still_compile() -> None:
    _run, skipped = _blocks(GUIDE.read_text())
    assert skipped, "the guide shows how to point at servers started elsewhere"
    for body in skipped:
        compile(body, "<no-run block>", "exec")


@pytest.mark.timeout(120)
def test_every_python_block_of_the_guide_runs() -> None:
    run, _skipped = _blocks(GUIDE.read_text())
    assert len(run) >= 5
    namespace: dict[str, object] = {"__name__": "embedding_guide"}
    for number, body in enumerate(run, start=1):
        code = compile(body, f"{GUIDE.name}, python block {number}", "exec")
        exec(code, namespace)  # the guide's own code: running it is the point
    # What the guide claims, checked once more here: each part reached its end.
    assert namespace["result"] == "completed"
    assert namespace["http_result"] == "completed"
