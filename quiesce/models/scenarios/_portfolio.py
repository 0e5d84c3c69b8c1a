"""The scenario portfolio: one small exhaustive protocol configuration per §7 scenario.

What lives here: `PORTFOLIO`, one `PortfolioEntry` per scenario S1-S19 (the smallest
configuration of the implementation model that exhibits it, and the scenario mutants its
exhaustive check must kill), and `run_portfolio`, which exhausts each distinct
configuration once (`quiesce check --portfolio`). Each configuration stays under
`PORTFOLIO_BOUND` states, so the whole portfolio runs in CI where the reference size of
PROTOCOL.md §8 cannot be exhausted.

Two scenarios have no configuration: S13 and S14 are refusals at setup, before the
model's first state. Their scripted scenario runs (`quiesce.models.scenarios._scenarios`)
cover them, and their mutants' `killed_by` says so. S16 needs two faults, a controller
crash and a wrong digest at its restore: its configuration spends the second from a
budget of wrong digests alone (`digest_faults`), which keeps it small.

>>> run_portfolio().ok  # doctest: +SKIP
True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quiesce.check import CheckResult, check
from quiesce.models.implementation import ProtocolModel, ProtocolParams

__all__ = [
    "PORTFOLIO",
    "PORTFOLIO_BOUND",
    "PortfolioEntry",
    "PortfolioRun",
    "distinct_configurations",
    "run_portfolio",
    "small_params",
]

PORTFOLIO_BOUND = 300_000
"""No configuration the portfolio exhausts may have more states than this."""


def small_params(**overrides: Any) -> dict[str, Any]:
    """A minimal protocol configuration: one sibling of one turn, one trigger, nothing
    else unless asked (`overrides`)."""
    return {
        "siblings": 1,
        "turns": 1,
        "attempts": 1,
        "triggers": 1,
        "optimizer_steps": 0,
        "weight_sync": 0,
        "train_switch": 0,
        "prepare_retries": 1,
        "faults": 0,
        "crashes": False,
        **overrides,
    }


@dataclass(frozen=True)
class PortfolioEntry:
    """Scenario `scenario` of PROTOCOL.md §7: `exhibits` says how `params` (None: no
    configuration, `note` says why) shows it, and `mutants` names the scenario mutants
    that die on it."""

    scenario: str
    exhibits: str
    params: Mapping[str, Any] | None
    mutants: tuple[str, ...] = ()
    note: str = ""


_FAULT = small_params(faults=1)
_CRASH = small_params(triggers=0, faults=1, crashes=True)
_CRASH_MID_CHECKPOINT = small_params(faults=1, crashes=True)

PORTFOLIO: tuple[PortfolioEntry, ...] = (
    PortfolioEntry(
        "S1",
        "the group's deadline may fire while the checkpoint parks its rollout",
        small_params(),
        ("S1_deadline_runs_while_parked",),
    ),
    PortfolioEntry(
        "S2",
        "the train switch and the checkpoint both hold the deadlines; either ends first",
        small_params(train_switch=1),
        ("S2_boolean_suspend",),
    ),
    PortfolioEntry(
        "S3",
        "any call may answer 5xx or time out, and be retried once inside the attempt",
        small_params(faults=1, call_retries=1),
        ("S3_classified_by_exception_type", "retry_with_new_id"),
    ),
    PortfolioEntry(
        "S4",
        "a resume or abort may fail once",
        _FAULT,
        ("S4_release_failure_reraised",),
    ),
    PortfolioEntry(
        "S5",
        "a prepare may fail and its abort fail too, then the next trigger comes",
        # No rollout: the scenario is the controller's against the fences (a prepare that
        # times out, its abort lost, a second trigger). A running sibling only multiplies
        # the interleavings of two checkpoints (siblings=1: past 100,000 states).
        small_params(siblings=0, triggers=2, faults=1),
        ("S5_abort_with_new_id",),
    ),
    PortfolioEntry(
        "S6",
        "a prepare's reply may be lost after it was applied",
        _FAULT,
        ("S6_attempted_after_the_call",),
    ),
    PortfolioEntry(
        "S7",
        "an ACK may be accepted while the capture runs",
        small_params(),
        ("S7_no_reflush_at_capture",),
    ),
    PortfolioEntry(
        "S8",
        "a background ACK may be lost before the strict flush",
        _FAULT,
        note="its mutant's symptom is a checkpoint that keeps failing (agents not ready"
        " until the deadline), which no property states: the scripted S8 run kills it",
    ),
    PortfolioEntry(
        "S9",
        "the optimizer step may land between commit and capture",
        small_params(optimizer_steps=1),
        ("S9_optimizer_step_unnoticed",),
    ),
    PortfolioEntry(
        "S10",
        "the rollout may complete after the flush, before prepare (not ready, retried)",
        small_params(),
        note="its mutant's symptom is a checkpoint that keeps failing, which no property"
        " states: the scripted S10 run kills it",
    ),
    PortfolioEntry(
        "S11",
        "a group-scored sibling's deadline may expire while its sibling runs",
        small_params(siblings=2, attempts=2, triggers=0, group_scored=True),
        ("S11_group_scored_sibling_alone",),
    ),
    PortfolioEntry(
        "S12",
        "a controller crash after a published snapshot runs the M9 restore",
        _CRASH_MID_CHECKPOINT,
        note="the restore's discard planning is checked on the coordinator's policy"
        " directly: the scripted S12 run kills its mutant",
    ),
    PortfolioEntry(
        "S13",
        "an unknown recovery mode at setup",
        None,
        note="a refusal at setup, before the model's first state",
    ),
    PortfolioEntry(
        "S14",
        "an unmanaged multi-worker server at setup",
        None,
        note="a refusal at setup, before the model's first state",
    ),
    PortfolioEntry(
        "S15",
        "a prepare may be delayed and redelivered after its resume",
        _FAULT,
        ("S15_stale_prepare_accepted",),
    ),
    PortfolioEntry(
        "S16",
        "a controller crash after a published snapshot, and a restore reply reporting the"
        " wrong digest",
        # Two faults: a crash from the fault budget and a wrong digest from a budget of its
        # own (`digest_faults`); no rollout, as in S5. A budget of two faults of every kind
        # is 36,241 states and lets two controller crashes interleave with the restores.
        small_params(siblings=0, faults=1, crashes=True, digest_faults=1),
        note="its mutant (a restore that trusts every reported digest) ends in a silent"
        " divergence, which no property of the model states: the scripted S16 run kills it",
    ),
    PortfolioEntry(
        "S17",
        "a deadline may retire a completed, un-ACKed execution",
        small_params(attempts=2, triggers=0),
        ("S17_retire_releases_completed",),
    ),
    PortfolioEntry(
        "S18",
        "the controller may crash mid-checkpoint",
        _CRASH_MID_CHECKPOINT,
        ("S18_intent_ignored_at_restart",),
    ),
    PortfolioEntry(
        "S19",
        "a participant may crash and restart mid-rollout",
        _CRASH,
        ("S19_journal_not_durable",),
    ),
)
"""One entry per §7 scenario, S1-S19 in order."""


@dataclass(frozen=True)
class PortfolioRun:
    """The exhaustive check of each distinct configuration of the portfolio."""

    results: tuple[tuple[Mapping[str, Any], CheckResult[Any]], ...]
    seconds: float
    entries: tuple[PortfolioEntry, ...] = field(default=PORTFOLIO)

    @property
    def ok(self) -> bool:
        """Every configuration exhausted (within the bound) without a violation."""
        return all(result.ok and result.complete for _, result in self.results)

    def result_of(self, entry: PortfolioEntry) -> CheckResult[Any] | None:
        """The check of `entry`'s configuration (None: it has none)."""
        return next((result for params, result in self.results if params == entry.params), None)

    def to_json(self) -> dict[str, Any]:
        """The `quiesce check --portfolio --json` document."""
        return {
            "mode": "portfolio",
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "distinct_states": sum(r.distinct_states for _, r in self.results),
            "configurations": [
                {
                    "params": dict(params),
                    "scenarios": [e.scenario for e in self.entries if e.params == params],
                    "distinct_states": result.distinct_states,
                    "seconds": round(result.seconds, 3),
                    "complete": result.complete,
                    "violations": [v.property for v in result.violations],
                }
                for params, result in self.results
            ],
            "scenarios": [
                {
                    "scenario": e.scenario,
                    "exhibits": e.exhibits,
                    "params": None if e.params is None else dict(e.params),
                    "mutants": list(e.mutants),
                    "note": e.note,
                }
                for e in self.entries
            ],
        }


def distinct_configurations(
    entries: tuple[PortfolioEntry, ...] = PORTFOLIO,
) -> list[Mapping[str, Any]]:
    """Each configuration of `entries` to exhaust once, in order of first use."""
    out: list[Mapping[str, Any]] = []
    for entry in entries:
        if entry.params is not None and entry.params not in out:
            out.append(entry.params)
    return out


def run_portfolio(
    entries: tuple[PortfolioEntry, ...] = PORTFOLIO,
    on_result: Callable[[Mapping[str, Any], CheckResult[Any]], None] | None = None,
) -> PortfolioRun:
    """Exhaust each distinct configuration of `entries` once (at most `PORTFOLIO_BOUND`
    states each); `on_result` hears each one as it ends."""
    started = time.perf_counter()
    results = []
    for params in distinct_configurations(entries):
        model = ProtocolModel(ProtocolParams(**params))
        result = check(model, max_states=PORTFOLIO_BOUND)
        results.append((params, result))
        if on_result is not None:
            on_result(params, result)
    return PortfolioRun(tuple(results), time.perf_counter() - started, entries)
