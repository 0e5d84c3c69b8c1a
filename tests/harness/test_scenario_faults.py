"""Scenario faults of `simulate` (issue 28, part 2): every §7 scenario a simulated world can
produce is reached by the CI seeds (`NOT_SIMULATED` lists the others, each with why), and
each opt-in fault kind catches a planted bug that the run without it lets through."""

from __future__ import annotations

import importlib
from dataclasses import replace
from typing import Any

import pytest

from quiesce.adapters import SnapshotStore
from quiesce.harness import (
    FAILURE_SCENARIOS,
    LATENCY_PROFILES,
    NOT_SIMULATED,
    ScenarioFault,
    SimulationResult,
    simulate,
)
from quiesce.protocol import QuiesceConfig
from quiesce.protocol.controller import (
    ControllerEffect,
    ControllerInput,
    ControllerState,
    Coordinator,
)
from quiesce.protocol.controller.lowlevel import (
    CaptureFacts,
    CoordinatorPolicy,
    Recovered,
    Reply,
    judge_capture,
)
from quiesce.protocol.participant import AgentRole
from quiesce.protocol.wire import ErrorReply

SMALL: dict[str, Any] = {"steps": 4, "groups_per_step": 2, "group_size": 2}
# Every kind but `optimizer-race`, which spends the run's first checkpoint (skipped and
# aborted) and so moves the every-fault runs away from the capture that meets pending ACKs
# (S7); a run of its own reaches S9.
EVERY_FAULT = tuple(
    kind.value for kind in ScenarioFault if kind is not ScenarioFault.OPTIMIZER_RACE
)

# A fleet whose participants write their snapshot artifact for 0.5-1.5 s at commit, with
# rollout deadlines of 1.5 s: a park outlasts a group's remaining deadline (S1).
SLOW_WRITES = replace(
    LATENCY_PROFILES["fast"],
    name="slow-writes",
    snapshot_write_s=(0.5, 1.5),
    rollout_timeout_s=1.5,
    call_try_timeout_s=None,
    control_timeout_s=5.0,
)

# The CI seeds: a handful of small runs whose union reaches every scenario below.
CI_RUNS: list[tuple[dict[str, Any], int]] = [
    *(({"inject": EVERY_FAULT, "fault_rate": 0.1, **SMALL}, seed) for seed in (1, 3, 5)),
    ({"crash_at_step": 2, "resources_mode": "restart_only", **SMALL}, 0),
    (
        {"fault_rate": 0.15, "group_scored": True, "target_level": "prompt_group", **SMALL},
        1,
    ),
    ({"inject": ("duplicate-snapshot",), "steps": 4}, 1),
    # A resume or abort failing past its in-call retries (S4): half the calls fault.
    ({"fault_rate": 0.5, **SMALL}, 0),
    # A park longer than a group's remaining deadline (S1).
    ({"latency": SLOW_WRITES, **SMALL}, 0),
    # An optimizer step between commit and capture (S9).
    ({"inject": ("optimizer-race",), **SMALL}, 0),
]


def test_the_ci_seeds_reach_every_simulated_scenario() -> None:
    reached: dict[str, str] = {}
    for options, seed in CI_RUNS:
        result = simulate(seed=seed, coverage=True, **options)
        assert result.verdict == "ok", (options, seed, result.violations)
        assert result.coverage is not None
        for scenario, evidence in result.coverage.evidence.items():
            reached.setdefault(scenario, evidence)
    expected = set(FAILURE_SCENARIOS) - set(NOT_SIMULATED)
    assert expected <= set(reached), sorted(expected - set(reached))
    # Nothing listed as out of reach is reached: each list says why, and must stay true.
    assert not set(NOT_SIMULATED) & set(reached)


def test_a_run_without_the_new_options_reports_no_coverage() -> None:
    result = simulate(seed=3, **SMALL)
    assert result.coverage is None
    assert "coverage" in result.model_dump()  # present, None: the CLI leaves it out


def test_each_fault_kind_reaches_its_scenario_and_keeps_the_invariants() -> None:
    scenario = {
        "conflict": "S5",
        "preparing-intent-crash": "S18",
        "restore-digest-mismatch": "S16",
        "optimizer-race": "S9",
    }
    for kind, expected in scenario.items():
        result = simulate(seed=1, coverage=True, inject=(kind,), **SMALL)
        assert result.verdict == "ok", (kind, result.violations)
        assert result.coverage is not None
        assert expected in result.coverage.scenarios, (kind, result.coverage.scenarios)


def test_duplicate_snapshot_makes_two_snapshots_match_and_the_newest_is_taken() -> None:
    result = simulate(seed=0, inject=("duplicate-snapshot",), **SMALL)
    assert result.verdict == "ok", result.violations
    [restore] = result.restores
    assert restore["kind"] == "snapshot"
    assert any(why == "older_than_selected" for _, why in restore["rejected"])


def test_staging_corruption_aborts_the_attempt_and_publishes_nothing_corrupt() -> None:
    plain = simulate(seed=0, **SMALL)
    result = simulate(seed=0, inject=("staging-corruption",), **SMALL)
    assert result.verdict == "ok", result.violations
    assert result.checkpoints.aborted == plain.checkpoints.aborted + 1


def test_inject_needs_checkpointing() -> None:
    with pytest.raises(ValueError, match="inject needs checkpointing"):
        simulate(checkpointing=False, inject=("conflict",), **SMALL)


# ------------------------------------------------------------------ planted bugs


class ConflictIsARefusal(Coordinator):
    """Planted: a `checkpoint_conflict` is read as a plain refusal (the active id dropped),
    so the id another controller left is never aborted (S5)."""

    def step(
        self, state: ControllerState, now: float, input: ControllerInput
    ) -> tuple[ControllerState, tuple[ControllerEffect, ...]]:
        if isinstance(input, Reply) and isinstance(input.result, ErrorReply):
            input = replace(input, result=input.result.model_copy(update={"active_id": None}))
        return super().step(state, now, input)


class IgnoresTheIntent(ConflictIsARefusal):
    """Planted: a restarting controller does not read its intent record (S18). The restore's
    conflict handling would abort the id the dead controller left all the same (a second
    defence, S5), so the planted controller has lost that too."""

    def step(
        self, state: ControllerState, now: float, input: ControllerInput
    ) -> tuple[ControllerState, tuple[ControllerEffect, ...]]:
        if isinstance(input, Recovered):
            input = replace(input, intent=None)
        return super().step(state, now, input)


def trusts_restore_digests(config: QuiesceConfig) -> Coordinator:
    """Planted: the restore takes every reported digest for the committed one (S16)."""
    judge = CoordinatorPolicy().judge_restore

    def judge_without_digests(expected: Any, replies: Any, *args: Any, **kwargs: Any) -> Any:
        trusted = {name: getattr(replies.get(name), "digest", d) for name, d in expected.items()}
        return judge(trusted, replies, *args, **kwargs)

    return Coordinator(config, policy=CoordinatorPolicy(judge_restore=judge_without_digests))


def blind_to_the_trainer(config: QuiesceConfig) -> Coordinator:
    """Planted: the capture does not look at the trainer (an optimizer step that landed
    between commit and capture goes into the cut, S9)."""

    def judge(facts: CaptureFacts) -> Any:
        return judge_capture(replace(facts, trainer_moved=False))

    return Coordinator(config, policy=CoordinatorPolicy(judge_capture=judge))


def _verdicts(kind: str, seed: int, **planted: Any) -> tuple[SimulationResult, SimulationResult]:
    """The planted bug's run without the fault kind, and with it."""
    return (
        simulate(seed=seed, **planted, **SMALL),
        simulate(seed=seed, inject=(kind,), **planted, **SMALL),
    )


@pytest.mark.parametrize(
    ("kind", "factory"),
    [
        ("conflict", ConflictIsARefusal),
        ("preparing-intent-crash", IgnoresTheIntent),
        ("restore-digest-mismatch", trusts_restore_digests),
        ("optimizer-race", blind_to_the_trainer),
    ],
)
def test_a_planted_controller_bug_is_caught_only_with_its_fault_kind(
    kind: str, factory: Any
) -> None:
    without, with_fault = _verdicts(kind, 1, coordinator_factory=factory)
    assert without.verdict == "ok", without.violations
    assert with_fault.verdict != "ok", kind


def test_publishing_unverified_staging_is_caught_only_with_staging_corruption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publish = SnapshotStore.publish

    def publish_unverified(self: SnapshotStore, checkpoint_id: str) -> Any:
        # Planted: publication trusts the staged files (no re-hash before the rename).
        self._verify_dir = self._read_manifest  # type: ignore[method-assign]
        try:
            return publish(self, checkpoint_id)
        finally:
            del self._verify_dir

    monkeypatch.setattr(SnapshotStore, "publish", publish_unverified)
    without, with_fault = _verdicts("staging-corruption", 0)
    assert without.verdict == "ok", without.violations
    assert with_fault.verdict == "violated"
    assert any("does not verify" in v for v in with_fault.violations)


# The planted bugs inside the controller are reached by name, as a bug would be.
_restore_flow = importlib.import_module("quiesce.protocol.controller._restore_flow")
_SELECT = _restore_flow.select_snapshot


def _older_match(anchor: Any, candidates: Any, **kwargs: Any) -> Any:
    """`select_snapshot` with the bug: the second-newest match when there are two."""
    newest = _SELECT(anchor, candidates, **kwargs)
    if newest.snapshot is None:
        return newest
    skip = (*kwargs.pop("rejected", ()), (str(newest.snapshot.snapshot_id), "planted"))
    older = _SELECT(anchor, candidates, rejected=skip, **kwargs)
    return newest if older.snapshot is None else older


def test_restoring_the_older_of_two_matches_is_caught_only_with_duplicate_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with monkeypatch.context() as planted:
        planted.setattr(_restore_flow, "select_snapshot", _older_match)
        # A crash and a restore without the fault kind: one snapshot matches, nothing to
        # get wrong; restoring the older of two is consistent and loses nothing, so the
        # lineage oracle lets it through even when two match.
        crashed = simulate(seed=0, crash_at_step=2, **SMALL)
        without, with_fault = _verdicts("duplicate-snapshot", 0)
    assert crashed.verdict == "ok", crashed.violations
    assert without.verdict == "ok", without.violations
    assert with_fault.verdict == "violated"
    assert any("not the newest matching snapshot" in v for v in with_fault.violations)
    # The same run without the bug takes the newest and passes.
    assert simulate(seed=0, inject=("duplicate-snapshot",), **SMALL).verdict == "ok"


_ACK = AgentRole.ack


def _any_receipt(self: AgentRole, rules: Any, receipts: Any) -> Any:
    """`AgentRole.ack` with the bug: a receipt naming a held execution's key releases it,
    whatever its text (the exact-receipt match of M3 is gone)."""
    held = {(r.rollout_id, r.attempt): self.find((r.rollout_id, r.attempt)) for r in receipts}
    quoted = [
        r.model_copy(update={"receipt": e.data.receipt})
        if (e := held[(r.rollout_id, r.attempt)]) is not None and e.data.receipt
        else r
        for r in receipts
    ]
    return _ACK(self, rules, quoted)


def test_an_agent_taking_any_receipt_is_caught_only_with_forged_receipt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with monkeypatch.context() as planted:
        planted.setattr(AgentRole, "ack", _any_receipt)
        # The controller quotes every receipt exactly: without a forged one, the bug is
        # never exercised; and an early release loses nothing the lineage would count.
        without, with_fault = _verdicts("forged-receipt", 1)
    assert without.verdict == "ok", without.violations
    assert with_fault.verdict == "violated"
    assert any("forged receipt" in v for v in with_fault.violations), with_fault.violations
    # Without the bug the agent keeps the result until the controller's exact ACK.
    assert simulate(seed=1, inject=("forged-receipt",), **SMALL).verdict == "ok"
