"""The mutant catalog: named variants of the protocol that each re-introduce one known bug.

What lives here: `MUTANTS`, one *scenario* mutant per PROTOCOL.md §7 scenario (S1-S19),
each naming its scenario, the check that kills it and the smallest configuration that
does; *generated* mutants derived mechanically from the tables (drop each guard, send each
row to another state), named by their row's key (`_names`) and judged by the stages that
reach their row (`_stages`); and `verify`, which runs a mutant against its killing check
and stops at the first violation. A mutant that survives its check means the check can no
longer fail for that bug: `quiesce mutants --verify` exits 1 if a scenario mutant survives.

How a mutant is built. Where the bug lives in a table it is a derived table (`_bugs`
derives each once, for this catalog and the design mutants alike) run through the very
same model (`Hooks`); where it lives in one of the controller's pure decisions
(classification, discovery, levels, the capture rule, restore judging and planning) it is
a `CoordinatorPolicy` with that one function swapped; the participant's tables
(`ParticipantRules`) and its recovery from a journal are `Hooks` fields too. Where the
explorer cannot express the scenario (the M9 restore planning, the setup refusals, a
liveness bug whose symptom is "the checkpoint keeps failing"), the killing check is a
scripted run (`scenario:<name>`): one of the §7 scripts of
`quiesce.models.scenarios._scenarios`, driven on the mutant's own composed system
(`scenario_system(hooks)`).

>>> verify(MUTANTS["S2_boolean_suspend"]).killed  # doctest: +SKIP
True
"""

from __future__ import annotations

import functools
import random
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import quiesce.mutants._bugs as bugs
from quiesce.check import Model, add_mutants, check, with_faults
from quiesce.fsm import Table, label
from quiesce.models.implementation import Hooks, ProtocolModel, ProtocolParams, System
from quiesce.models.scenarios import (
    SCENARIOS,
    Scenario,
    ScenarioFailed,
    scenario_system,
    small_params,
)
from quiesce.mutants._names import mutant_name, row_keys
from quiesce.mutants._notes import SURVIVOR_NOTES, check_notes
from quiesce.mutants._stages import Site, Status, describe_violation, judge
from quiesce.protocol import (
    CAUSES,
    Cause,
    Classification,
    Disposition,
    OpId,
    OverrideRefines,
    RecoveryLevel,
)
from quiesce.protocol.controller import Fleet, validate_discovery
from quiesce.protocol.controller.lowlevel import (
    CaptureFacts,
    CaptureVerdict,
    CoordinatorPolicy,
    EnvironmentTraits,
    judge_capture,
    judge_restore,
    lower_levels,
)
from quiesce.protocol.machines import (
    ADMISSION_GATE,
    AGENT_EXECUTION,
    CALL,
    CHECKPOINT,
    CONTROL_FENCE,
    DEADLINE_REGISTRY,
    CallInput,
)
from quiesce.protocol.participant import (
    Journal,
    ParticipantRules,
    ParticipantState,
    new_participant,
)

__all__ = [
    "MUTANTS",
    "Mutant",
    "Verdict",
    "generated_mutants",
    "mutant_hooks",
    "scenario_mutants",
    "verify",
]

Kind = Literal["scenario", "generated"]


@dataclass(frozen=True)
class Mutant:
    """One named variant of the protocol and the check that must kill it.

    `hooks` builds the variant (derived tables, a swapped policy function, swapped module
    attributes). A scenario mutant names its check in `killed_by`: an explorer property
    (`I1`..`I8`, `no_stall`) run on `params` (the smallest configuration that kills it),
    or `scenario:<name>` for a scripted run (`scripted(hooks)`). A generated mutant
    (`killed_by="stages"`) names its `site`, the row it changes: it is judged by row
    coverage, then by the `STAGES` that reach that row (`_mutant_stages.judge`).
    """

    name: str
    kind: Kind
    scenario: str | None
    doc: str
    hooks: Callable[[], Hooks]
    killed_by: str
    params: Mapping[str, Any] = field(default_factory=dict)
    scripted: Scenario | None = None
    max_states: int = 50_000
    site: Site | None = None


@dataclass(frozen=True)
class Verdict:
    """What `verify` found: the `status` (killed or survived; for a generated mutant also
    equivalent or dead by design, neither a survivor), the property that killed it, in
    which stage, after how many states, and why."""

    mutant: Mutant
    status: Status
    killed_by: str | None
    states: int
    seconds: float
    detail: str = ""
    stage: str | None = None

    @property
    def killed(self) -> bool:
        """Did a check find the bug?"""
        return self.status == "killed"

    def to_json(self) -> dict[str, Any]:
        """The `quiesce mutants --verify --json` entry of this mutant."""
        return {
            "name": self.mutant.name,
            "kind": self.mutant.kind,
            "scenario": self.mutant.scenario,
            "status": self.status,
            "killed": self.killed,
            "killed_by": self.killed_by,
            "stage": self.stage,
            "expected_killer": self.mutant.killed_by,
            "states": self.states,
            "seconds": round(self.seconds, 3),
            "detail": self.detail,
        }


# ============================================================================ building blocks


def _hooks(**fields: Any) -> Callable[[], Hooks]:
    """Hooks with the given fields (tables, `policy`, participant rules, recovery) swapped."""
    return functools.partial(Hooks, **fields)


def _swapped(**changes: Any) -> Callable[[], Hooks]:
    """Hooks whose policy is the protocol's own with `changes` (one swapped decision)."""
    return _hooks(policy=replace(CoordinatorPolicy(), **changes))


# ------------------------------------------------------------------ scenario mutants (code)


def _by_exception_type(cause: Cause) -> Classification:
    # The old bug: a participant error surfaced as a generic exception, typed as fatal.
    found = CAUSES[cause]
    if cause in (Cause.PARTICIPANT_ERROR, Cause.TIMEOUT, Cause.REQUEST_LOST, Cause.REPLY_LOST):
        return Classification(cause, "invariant_error", Disposition.FATAL)
    return found


def _s6_call() -> Table[Any, Any]:
    # A participant is marked attempted only when it answers, not when the call goes out.
    rows = list(CALL.rows)
    for index, row in enumerate(rows):
        if row.input is CallInput.SEND:
            rows[index] = replace(row, effects=("send_call",))
        elif row.input in (CallInput.RECV_ANSWER, CallInput.RECV_NOT_READY):
            rows[index] = replace(row, effects=("mark_attempted", *row.effects))
    return CALL.derive("attempted_after_the_call", rows=rows)


def _capture_without_reflush(facts: CaptureFacts) -> CaptureVerdict:
    # S7 mutant: pending ACKs at capture are neither re-flushed nor a reason to skip.
    return judge_capture(replace(facts, acks_pending=False))


def _capture_without_step_check(facts: CaptureFacts) -> CaptureVerdict:
    # S9 mutant: an optimizer step between commit and capture goes unnoticed.
    return judge_capture(replace(facts, trainer_moved=False))


def _live_level_ignored(_fleet: Fleet | None, _environment: str, target: Any) -> Any:
    # S11 mutant: the group-scored environment's lowered live level is ignored.
    return target


def _journal_loses_everything(
    journal: Journal, incarnation: str, _rules: ParticipantRules
) -> ParticipantState:
    # S19 mutant: a restart comes back with a fresh fence and role (nothing was durable).
    return new_participant(journal.config, incarnation)


def _no_discards(value: Any, op_id: OpId, restored: Iterable[Any]) -> tuple[Any, ...]:
    # S12 mutant: restart_only continuations are resumed like any other.
    return ()


def _new_id_per_retry(op_id: OpId, retry: int) -> OpId:
    # A call retried inside the attempt goes out under a new id (one nobody else minted),
    # instead of the same one the fence would replay (§4).
    return op_id if retry == 0 else replace(op_id, seq=op_id.seq + 1000 * retry)


def _judge_ignoring_digests(
    expected: Mapping[str, str], replies: Any, failures: Any, ledger: Any = None
) -> Any:
    # S16 mutant: restore replies are accepted whatever digest they report.
    return judge_restore({}, replies, failures, ledger)


class _Everything(frozenset[str]):
    """A set that contains every value (the S13/S14 mutants accept any mode)."""

    def __contains__(self, item: object) -> bool:
        return True


def _lower_allowing_refinement(target: Any, environments: Any, overrides: Any = None) -> Any:
    # Overrides allowed to refine: a finer override is silently kept instead of refused.
    return lower_levels(target, environments, None)


# ------------------------------------------------------------------ scripted scenario checks

# The mutant of S11's overrides swaps one decision of the coordinator's policy: its killer
# asks the mutant's own coordinator for that decision directly (as the §7 scripts of S12 and
# S16 do).


def _scenario_overrides(system: System) -> None:
    """S11: an override finer than the target level is refused."""
    environments = [EnvironmentTraits("agent")]
    try:
        system.coordinator.policy.lower_levels(
            RecoveryLevel.SIBLING, environments, {"agent": RecoveryLevel.TURN}
        )
    except OverrideRefines:
        return
    raise ScenarioFailed("an override finer than the target was accepted")


# ------------------------------------------------------------------ the catalog


# How the protocol model runs each known bug that does not live in one of its tables
# (`_bugs.KNOWN_BUGS` derives the table bugs), and the scripts that kill the bugs the
# explorer cannot express: the §7 scripts tests/protocol/test_scenarios.py runs too, which
# `verify` runs on the mutant's own `scenario_system`.
_HOOKS: Mapping[str, Callable[[], Hooks]] = {
    "S3_classified_by_exception_type": _swapped(classify=_by_exception_type),
    "retry_with_new_id": _swapped(retry_op_id=_new_id_per_retry),
    "S6_attempted_after_the_call": _hooks(call=_s6_call()),
    "S7_no_reflush_at_capture": _swapped(judge_capture=_capture_without_reflush),
    "S9_optimizer_step_unnoticed": _swapped(judge_capture=_capture_without_step_check),
    "S11_group_scored_sibling_alone": _swapped(retry_level=_live_level_ignored),
    "S11_overrides_refine": _swapped(lower_levels=_lower_allowing_refinement),
    "S12_restart_only_resumed": _swapped(plan_discards=_no_discards),
    "S13_unknown_recovery_mode_accepted": _swapped(
        validate_discovery=functools.partial(validate_discovery, recovery_modes=_Everything())
    ),
    "S14_unmanaged_accepted": _swapped(
        validate_discovery=functools.partial(validate_discovery, multi_process_modes=_Everything())
    ),
    "S16_restore_digests_unchecked": _swapped(judge_restore=_judge_ignoring_digests),
    "S19_journal_not_durable": _hooks(recover=_journal_loses_everything),
}
_SCRIPTS: Mapping[str, Scenario] = {
    "S8_flush_not_strict": SCENARIOS["s8_background_ack_failure_is_caught_by_the_strict_flush"],
    "S10_not_ready_fails_at_once": SCENARIOS[
        "s10_completion_after_the_flush_is_acked_and_prepare_retried_until_ready"
    ],
    "S11_overrides_refine": _scenario_overrides,
    "S12_restart_only_resumed": SCENARIOS[
        "s12_restart_only_continuations_are_discarded_before_resume"
    ],
    "S13_unknown_recovery_mode_accepted": SCENARIOS[
        "s13_unknown_recovery_mode_is_refused_at_setup_naming_the_server"
    ],
    "S14_unmanaged_accepted": SCENARIOS["s14_unmanaged_multi_worker_server_is_refused_at_setup"],
    "S16_restore_digests_unchecked": SCENARIOS["s16_restore_digest_mismatch_rejects_the_snapshot"],
}


def scenario_mutants() -> list[Mutant]:
    """One mutant per scenario S1-S19 (and the refining-override variant of S11): every
    known bug the protocol model carries (`_bugs.KNOWN_BUGS`), killed by its `protocol`
    check."""
    carried = {name for name, bug in bugs.KNOWN_BUGS.items() if bug.protocol is not None}
    if stray := sorted((set(_HOOKS) | set(_SCRIPTS)) - carried):
        raise ValueError(f"builders for no known bug of the protocol model: {', '.join(stray)}")
    return [_scenario(bugs.KNOWN_BUGS[name]) for name in bugs.KNOWN_BUGS if name in carried]


def _scenario(bug: bugs.KnownBug) -> Mutant:
    assert bug.protocol is not None
    hooks = _HOOKS.get(bug.name)
    if hooks is None:
        if bug.table is None:
            raise ValueError(f"known bug {bug.name} lives outside the tables: give its hooks")
        hooks = functools.partial(_hooks_for, bug.table())
    scripted = _SCRIPTS.get(bug.name)
    if (scripted is None) == bug.protocol.check.startswith("scenario:"):
        raise ValueError(f"known bug {bug.name}: a scripted check needs its script, and only it")
    if scripted is not None:
        params: Mapping[str, Any] = {}
    else:
        params = small_params(**bug.protocol.params)
    return Mutant(
        bug.name, "scenario", bug.scenario, bug.doc, hooks, bug.protocol.check, params, scripted
    )


_GENERATED_TABLES: tuple[Table[Any, Any], ...] = (
    CHECKPOINT,
    ADMISSION_GATE,
    DEADLINE_REGISTRY,
    CONTROL_FENCE,
    AGENT_EXECUTION,
)


def _hooks_for(table: Table[Any, Any]) -> Hooks:
    """The model's hooks with `table` in place of the protocol's table of that name."""
    if table.name == CHECKPOINT.name:
        return Hooks(checkpoint=table)
    if table.name == ADMISSION_GATE.name:
        return Hooks(gate=table)
    if table.name == DEADLINE_REGISTRY.name:
        return Hooks(deadlines=table)
    if table.name == CALL.name:
        return Hooks(call=table)
    if table.name == CONTROL_FENCE.name:
        return Hooks(participant=ParticipantRules(fence=table))
    if table.name == AGENT_EXECUTION.name:
        return Hooks(participant=ParticipantRules(agent=table))
    raise ValueError(f"the protocol model runs no table named {table.name}")


def generated_mutants() -> list[Mutant]:
    """Drop each guard, and send each row to every other state, of every protocol table
    the model runs (`checkpoint`, `admission_gate`, `deadline_registry`,
    `control_fence`, `agent_execution`); each is judged by `STAGES`. Each is named by its
    row's key (`_names`: table, sources, input, guard), never by the row's index; two rows
    of one table with one key raise `ValueError`."""
    out: list[Mutant] = []
    for table in _GENERATED_TABLES:
        for index, (where, row) in enumerate(zip(row_keys(table), table.rows, strict=True)):
            if row.guard:
                out.append(
                    _generated(
                        mutant_name(table, index, "drop_guard"),
                        f"{where}: guard [{row.guard}] dropped",
                        Site(table, index, "drop_guard"),
                    )
                )
            current = row.target
            was = label(current) if current else "holding"
            for state in table.states:
                if state is current or (
                    current is None and len(row.sources) == 1 and state in row.sources
                ):
                    continue
                out.append(
                    _generated(
                        mutant_name(table, index, "retarget", label(state)),
                        f"{where}: goes to {label(state)} instead of {was}",
                        Site(table, index, "retarget", state),
                    )
                )
    return out


def _generated(name: str, doc: str, site: Site) -> Mutant:
    def build() -> Hooks:
        return _hooks_for(site.mutated())

    return Mutant(name, "generated", None, doc, build, "stages", site=site)


def _catalog() -> dict[str, Mutant]:
    mutants = [*scenario_mutants(), *generated_mutants()]
    catalog = {m.name: m for m in mutants}
    if len(catalog) != len(mutants):
        twice = sorted({m.name for m in mutants if sum(n.name == m.name for n in mutants) > 1})
        raise ValueError(f"mutants named twice: {', '.join(twice)}")
    check_notes(SURVIVOR_NOTES, {m.name for m in mutants if m.kind == "generated"})
    return catalog


MUTANTS: dict[str, Mutant] = _catalog()
"""Every mutant by name: scenario ones first, then the generated ones."""


def mutant_hooks(name: str) -> Hooks:
    """The hooks of mutant `name` (for `quiesce check --mutant NAME`)."""
    return MUTANTS[name].hooks()


def _build(params: Mapping[str, Any], faults: int | None, mutant: str | None) -> ProtocolModel:
    assert mutant is not None  # the registry calls it for these mutants only
    chosen = ProtocolParams(**with_faults(params, faults))
    return ProtocolModel(chosen, hooks=mutant_hooks(mutant), name=f"protocol[{mutant}]")


add_mutants("protocol", {name: m.doc for name, m in MUTANTS.items()}, _build)


def sample_generated(count: int, seed: int) -> list[Mutant]:
    """A seeded sample of `count` generated mutants (all of them if fewer)."""
    generated = [m for m in MUTANTS.values() if m.kind == "generated"]
    if count >= len(generated):
        return generated
    return random.Random(seed).sample(generated, count)


STEP_TIMEOUT_S = 2.0
"""One model step of a mutant that takes longer than this is a hang (the core looped)."""


class StepHang(Exception):
    """A single step of the composed system did not return within `STEP_TIMEOUT_S`."""


def _hang(_signum: int, _frame: Any) -> None:
    raise StepHang(f"one step ran longer than {STEP_TIMEOUT_S}s: the core loops")


@contextmanager
def watching_hangs() -> Iterator[bool]:
    """Within the block, a model step armed with `STEP_TIMEOUT_S` (`ProtocolModel.step_timeout`)
    that runs longer raises `StepHang`. Signals reach the main thread only: elsewhere it
    watches nothing and yields False."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = signal.signal(signal.SIGALRM, _hang)
    try:
        yield True
    finally:
        signal.signal(signal.SIGALRM, previous)


def verify(mutant: Mutant) -> Verdict:
    """Run `mutant` against its killing check, stopping at the first violation (a
    generated one: judged by row coverage, then by the stages that reach its row)."""
    started = time.perf_counter()
    hooks = mutant.hooks()
    if mutant.scripted is not None:
        try:
            mutant.scripted(scenario_system(hooks))
        except Exception as error:
            detail = f"{type(error).__name__}: {error}"
            seconds = time.perf_counter() - started
            return Verdict(mutant, "killed", mutant.killed_by, 0, seconds, detail)
        seconds = time.perf_counter() - started
        return Verdict(mutant, "survived", None, 0, seconds, "the scenario passed")
    with watching_hangs() as watch:
        if mutant.site is not None:
            found = judge(mutant.site, hooks, mutant.name, functools.partial(_arm, watch=watch))
            return Verdict(mutant, **asdict(found))
        model = ProtocolModel(
            ProtocolParams(**mutant.params), hooks=hooks, name=f"protocol[{mutant.name}]"
        )
        _arm(model, watch=watch)
        result = check(model, max_states=mutant.max_states, stop_on_violation=True)
    seconds = time.perf_counter() - started
    if result.violations:
        violation = result.violations[0]
        detail = describe_violation(violation)
        states = result.distinct_states
        return Verdict(mutant, "killed", violation.property, states, seconds, detail)
    bound = " (bounded)" if result.truncated else ""
    detail = f"no violation{bound} by the explorer"
    return Verdict(mutant, "survived", None, result.distinct_states, seconds, detail)


def _arm(model: Model[Any], *, watch: bool) -> None:
    """Arm the hang watchdog on `model`'s steps when running on the main thread."""
    if isinstance(model, ProtocolModel):
        model.step_timeout = STEP_TIMEOUT_S if watch else None
