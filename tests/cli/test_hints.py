"""Every command quiesce prints as a hint ("draw one with: ...", "regenerate with: ...", a
`quiesce ...` in backticks) runs as printed.

Each case runs a command that prints hints, takes every hinted command out of its output,
and runs that too, in the same directory (so a hinted path exists): it must not be a usage
error, a failure to start, or a traceback. A hinted model check may find its mutant's
violation (exit 1): that is what it was hinted for. `test_every_hint_site_has_a_case`
keeps the cases in step with the places in `quiesce/` that print a hint.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from quiesce.cli import main

ROOT = Path(__file__).resolve().parents[2]
# A hinted command: after one of the phrases that introduce one, or in backticks; it ends
# at the line's end, a closing backtick, or the end of an HTML comment.
HINT = re.compile(
    r"(?:draw one with: |regenerate with: |`)((?:uv run )?quiesce [^`\n]+?)(?= -->|`|$)", re.M
)

CASES: dict[str, list[str]] = {
    "draw a two-phase trace": [
        "check", "two-phase", "--mutant", "commit_without_message", "--trace-out", "traces",
    ],
    "draw a design trace": [
        "check", "design", "--mutant", "S15_stale_prepare_accepted", "--trace-out", "traces",
    ],
    "an unknown mutant": ["check", "design", "--mutant", "S2_boolean_suspnd"],
    "a model's mutants": ["mutants", "--model", "design"],
    "an unknown model table": ["diagram", "nope", "--model", "design"],
    "a drawn table": ["diagram", "checkpoint"],
    "a table grid": ["tables", "--matrix", "checkpoint"],
    "the mutant catalog": ["mutants"],
}  # fmt: skip

# Hinted commands that run for minutes: run with the slow tests, and why.
SLOW = {"quiesce mutants --verify": "verifies every scenario mutant and 50 generated ones"}


def _hints(output: str) -> list[str]:
    return [" ".join(found.split()) for found in HINT.findall(output)]


def _case_hints(case: str) -> list[str]:
    ran = CliRunner().invoke(main, CASES[case])
    assert "Traceback" not in ran.output, ran.output
    hints = _hints(ran.stdout + ran.stderr)
    assert hints, f"{case}: no hint in {ran.stdout + ran.stderr!r:.600}"
    return hints


@pytest.mark.parametrize("case", list(CASES))
def test_every_printed_hint_runs(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for hint in _case_hints(case):
        if hint not in SLOW:  # those run in test_the_slow_hints_run (-m slow)
            _run_hint(hint)


@pytest.mark.slow
@pytest.mark.parametrize("hint", list(SLOW), ids=list(SLOW.values()))
def test_the_slow_hints_run(hint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _run_hint(hint)


def _run_hint(hint: str) -> None:
    args = shlex.split(hint)
    args = args[args.index("quiesce") + 1 :]
    ran = CliRunner().invoke(main, args)
    assert ran.exit_code in (0, 1), f"{hint!r} exited {ran.exit_code}: {ran.output[-600:]}"
    assert "error:" not in ran.stderr and "Traceback" not in ran.output, ran.output[-600:]


def test_the_hints_say_what_they_promise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    [listing] = _case_hints("an unknown mutant")
    listed = CliRunner().invoke(main, listing.split()[1:]).stdout
    assert listing == "quiesce mutants --model design"
    assert listed.splitlines()[-1].startswith("10 mutants of design")
    [drawn] = _case_hints("draw a two-phase trace")
    assert drawn.startswith("quiesce diagram rm --model two-phase --trace traces/")
    assert "(violates TCConsistent)" in CliRunner().invoke(main, drawn.split()[1:]).stdout
    [drawn] = _case_hints("draw a design trace")  # a protocol table: no --model
    assert re.fullmatch(r"quiesce diagram \w+ --trace traces/I3\.\S+\.json", drawn), drawn
    # The fence prepares twice; only the second time (step 4) violates I3 (issue 27).
    assert "1, 4. recv_prepare / start (violates I3 at 4)" in (
        CliRunner().invoke(main, drawn.split()[1:]).stdout
    )


def _printed_strings() -> list[str]:
    """Every string in `quiesce/` that is not a docstring and names a quiesce command."""
    found = []
    for path in (ROOT / "quiesce").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        found += [
            f"{path.relative_to(ROOT)}: {node.value}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and re.search(r"(draw one with|regenerate with|`quiesce [a-z])", node.value)
        ]
    return found


def test_every_hint_site_has_a_case() -> None:
    # The sites that print a hint today, each exercised by a case above; a new one fails
    # here until it has a case (or is a help text, which prints no command to run).
    sites = {line.partition(":")[0] for line in _printed_strings()}
    assert sites <= {
        "quiesce/cli/_counterexample.py",  # draw one with (two cases)
        "quiesce/cli/_mutants.py",  # the catalog, a model's mutants (and --model's help)
        "quiesce/cli/__init__.py",  # diagram's summary: `quiesce tables` (help text)
        "quiesce/cli/_explore.py",  # --trace's help text
        "quiesce/cli/_serve.py",  # --work's help text
        "quiesce/explore/_traces.py",  # names the JSON of `quiesce check --json`, not a command
        "quiesce/fsm/_diagram.py",  # regenerate with (a drawn table)
        "quiesce/fsm/_matrix.py",  # regenerate with (a table grid)
    }, sorted(_printed_strings())
