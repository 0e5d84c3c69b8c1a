"""The figures of README.md and the pages it leads to (docs/simulate.md, docs/checking.md,
docs/conformance.md, docs/protocol.md) are what the commands print: each quoted number is
produced here by the command (or the model call it wraps, or read from `tests/pins.py`, whose
counts the tests exhaust on every run) and compared with its page, so a change that moves a
figure fails until the page moves with it.

A figure is a regex over its page (whitespace-normalised, so reflowing a paragraph does
not matter) whose groups are the quoted numbers, and the run that produces them. Left out,
because no command reproduces them byte for byte: timings and rates, the benchmarks
(ratios measured on a loaded machine), `chaos` (real processes killed on wall-clock
timing), `conform`'s request counts (hypothesis draws) and hypothesis catch rates.
Expensive figures (`mutants --verify`, the 7-RM two-phase row) are marked `slow`
(`uv run pytest -m slow tests/docs`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from quiesce.check import check
from quiesce.cli import main
from quiesce.models import ProtocolModel, ProtocolParams
from tests import pins

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CHECKING = "docs/checking.md"


def _page(page: str) -> str:
    return " ".join((ROOT / page).read_text(encoding="utf-8").split())


def _quoted(pattern: str, page: str) -> tuple[str, ...]:
    """The groups of `pattern` in `page`, thousands separators dropped."""
    found = re.search(pattern, _page(page))
    assert found is not None, f"{page} no longer has a sentence matching {pattern!r}"
    return tuple(group.replace(",", "") for group in found.groups())


def _run(*args: str, exit_code: int = 0) -> Any:
    """`quiesce ARGS --json`, its document."""
    ran = CliRunner().invoke(main, [*args, "--json"])
    assert ran.exit_code == exit_code, ran.output
    return json.loads(ran.stdout)


@dataclass(frozen=True)
class Figure:
    """Numbers a page quotes (`pattern`'s groups) and the run that prints them."""

    name: str
    pattern: str
    produce: Callable[[], Sequence[object]]
    page: str = CHECKING


def _fault_example() -> list[object]:
    run = _run("simulate", "--fault-rate", "0.05", "--crash-at-step", "4", "--seed", "0")
    checkpoints, rollouts = run["checkpoints"], run["rollouts"]
    [restore] = run["restores"]
    return [
        "--fault-rate 0.05 --crash-at-step 4 --seed 0",
        run["faults_injected"],
        run["participant_restarts"],
        checkpoints["completed"],
        checkpoints["failed"],
        restore["snapshot_id"],
        restore["redispatched"],
        rollouts["resumed_from_turn"],
        rollouts["rerun_from_scratch"],
        rollouts["trained"],
        rollouts["lost"],
        rollouts["duplicated"],
        run["untrained"]["count"],
    ]


def _two_phase_row(rms: int) -> list[object]:
    plain = _run("check", "two-phase", "--set", f"rms={rms}")
    symmetric = _run("check", "two-phase", "--set", f"rms={rms}", "--symmetry")
    return [
        rms,
        plain["distinct_states"],
        plain["generated_states"],
        symmetric["distinct_states"],
    ]


def _two_phase(rms: int) -> Figure:
    number = r"\**([\d,]+)\**(?: \([^)]*\))?"
    return Figure(
        f"two-phase rms={rms}",
        rf"\| ({rms}) \| {number} \| ([\d,]+) \| ([\d,]+) \|",
        lambda: _two_phase_row(rms),
    )


# The exhaustive protocol configurations of README's table (`--set` / `--faults`).
_ONE_ROLLOUT: dict[str, Any] = dict(
    siblings=1,
    turns=1,
    attempts=1,
    triggers=1,
    optimizer_steps=0,
    weight_sync=0,
    train_switch=0,
    prepare_retries=1,
    faults=0,
    crashes=False,
)


def _protocol_states(symmetry: bool = False, **changes: Any) -> int:
    model = ProtocolModel(ProtocolParams(**{**_ONE_ROLLOUT, **changes}))
    return check(model, symmetry=symmetry).distinct_states


def _mutant_counts() -> list[object]:
    summary = _run("mutants")["summary"]["by_kind"]
    return [summary["scenario"], summary["generated"]]


def _verified(*options: str) -> dict[str, Any]:
    """`quiesce mutants --verify OPTIONS`: its summary (exit 0: no scenario mutant survived)."""
    summary: dict[str, Any] = _run("mutants", "--verify", *options)["summary"]["by_kind"]
    return summary


def _ci_sample() -> list[object]:
    generated = _verified("--sample", "50")["generated"]
    return [generated["run"], generated["killed"], round(100 * generated["killed"] / 50)]


def _all_generated() -> list[object]:
    generated = _verified("--all")["generated"]
    non_equivalent = generated["run"] - generated["equivalent"]
    return [
        generated["run"],
        generated["killed"],
        generated["equivalent"],
        generated["dead_by_design"],
        generated["survived"],
        round(100 * generated["killed"] / non_equivalent),
    ]


def _walks() -> list[object]:
    return [2000, _run("check", "protocol", "--walks", "2000", "--seed", "0")["distinct_states"]]


def _s17() -> list[object]:
    run = _run("check", "--walks", "200", "--mutant", "S17_retire_releases_completed", exit_code=1)
    return [run["violations"][0]["property"]]


def _two_phase_mutant() -> list[object]:
    run = _run("check", "two-phase", "--mutant", "commit_without_message", exit_code=1)
    return [1 if run["violations"] else 0]


FIGURES: list[Any] = [
    Figure(
        "simulate: the fault example",
        r"With `(--fault-rate 0\.05 --crash-at-step 4 --seed 0)`: (\d+) faults injected,"
        r" (\d+) participant restarts, (\d+) checkpoints completed and (\d+) failed"
        r".*?one restore from `([\w-]+)` that redispatched (\d+) attempts \((\d+) resumed"
        r" from a saved turn, (\d+) rerun from scratch\), (\d+) items trained, (\d+) lost,"
        r" (\d+) duplicated, (\d+) untrained",
        _fault_example,
        "docs/simulate.md",
    ),
    *(_two_phase(rms) for rms in (1, 2, 3, 4, 5)),
    pytest.param(_two_phase(7), marks=pytest.mark.slow, id="two-phase rms=7"),
    Figure(
        "protocol: one rollout",
        r"\| one sibling, one turn, one attempt, one trigger, no switches, no faults"
        r" \| ([\d,]+) \|",
        lambda: [_protocol_states()],
    ),
    Figure(
        "protocol: two siblings",
        r"\| two siblings, no trigger \| ([\d,]+) \(([\d,]+) with `--symmetry`\) \|",
        lambda: [
            _protocol_states(siblings=2, triggers=0),
            _protocol_states(symmetry=True, siblings=2, triggers=0),
        ],
    ),
    Figure(
        "protocol: two siblings, one checkpoint",
        r"\| two siblings, one trigger, two prepare retries, no faults \| ([\d,]+) \|",
        lambda: [pins.PROTOCOL_STATES["two_siblings_one_checkpoint"]],
    ),
    Figure(
        "protocol: every fault",
        r"\| one sibling, one trigger, two prepare retries, \*\*every fault kind\*\*"
        r" \(budget 1, crashes included\) \| ([\d,]+) \|",
        lambda: [pins.PROTOCOL_STATES["every_fault"]],
    ),
    Figure(
        "mutants: first checked at the small configuration",
        r"checked exhaustively at the small configuration \(([\d,]+) states unmutated",
        lambda: [_protocol_states()],
    ),
    Figure(
        "design: the reference size",
        r"run in CI\) \| \*\*([\d,]+)\*\* \|",
        lambda: [pins.DESIGN_REFERENCE_STATES],
    ),
    Figure(
        "design: the reference size (protocol page)",
        r"exhausted at the reference size with fault budget 1 \(([\d,]+) states\) in CI",
        lambda: [pins.DESIGN_REFERENCE_STATES],
        "docs/protocol.md",
    ),
    Figure(
        "mutants: the design stages",
        r"one fault or crash: ([\d,]+) states unmutated;.*?"
        r"design model again with one attempt and two faults \(([\d,]+) states;",
        lambda: [pins.DESIGN_STAGE_STATES, pins.TWO_FAULT_DESIGN_STAGE_STATES],
    ),
    Figure(
        "mutants: the catalog",
        r"All (\d+) scenario mutants are killed",
        lambda: _mutant_counts()[:1],
    ),
    Figure(
        "mutants: generated",
        r"plus ([\d,]+) generated ones \(every guard dropped",
        lambda: _mutant_counts()[1:],
    ),
    pytest.param(
        Figure(
            "mutants: the CI sample",
            r"the seeded CI sample of (\d+) kills (\d+) \((\d+)%",
            _ci_sample,
        ),
        marks=pytest.mark.slow,
        id="mutants: the CI sample",
    ),
    pytest.param(
        Figure(
            "mutants: --all",
            r"`--verify --all` runs all ([\d,]+) generated ones: (\d+) killed, (\d+)"
            r" equivalent, (\d+) dead by design and (\d+) survivors, a kill rate of (\d+)%",
            _all_generated,
        ),
        marks=pytest.mark.slow,
        id="mutants: --all",
    ),
    Figure(
        "check: CI's walks",
        r"CI takes ([\d,]+) walks \(about \d+ s, ([\d,]+) distinct states, no violation\)",
        _walks,
    ),
    Figure(
        "check: the S17 example",
        r"--mutant S17_retire_releases_completed # exit 1, (I\d)",
        _s17,
    ),
    Figure(
        "check: the two-phase mutant",
        r"--mutant commit_without_message --trace-out traces/ # exit (\d)",
        _two_phase_mutant,
    ),
]


@pytest.mark.parametrize(
    "figure", [f if not isinstance(f, Figure) else pytest.param(f, id=f.name) for f in FIGURES]
)
def test_the_page_quotes_what_the_command_prints(figure: Figure) -> None:
    quoted = _quoted(figure.pattern, figure.page)
    produced = tuple(str(value) for value in figure.produce())
    assert quoted == produced, (
        f"{figure.page}'s {figure.name!r} quotes {quoted}, the command prints {produced}: "
        "move the page with the change"
    )


def test_the_readme_picture_is_what_quiesce_diagram_draws() -> None:
    drawn = CliRunner().invoke(main, ["diagram", "checkpoint"])
    assert drawn.exit_code == 0
    text = README.read_text(encoding="utf-8")
    assert f"```mermaid\n{drawn.stdout}```" in text, (
        "README's picture is not `quiesce diagram checkpoint`: paste it again"
    )


def test_the_readme_python_runs() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)
    assert blocks, "the README lost its taste of embedding"
    for number, block in enumerate(blocks, 1):
        namespace: dict[str, object] = {"__name__": "readme"}
        exec(compile(block, f"README.md, python block {number}", "exec"), namespace)
    assert namespace["driver"].outcomes[-1].result == "completed"  # type: ignore[attr-defined]


def test_the_serve_example_creates_its_token_file() -> None:
    text = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    serve = text.index("uv run quiesce serve --role agent --port 8700")
    before = text[text.rindex("```console", 0, serve) : serve]
    assert re.search(r"> tok\b", before), "the serve example must write `tok` before reading it"
