"""The protocol model's independent oracles (`quiesce.models.oracles`, issue 28 part 1).

Each test plants a bug in the code the model runs, one that the code's own tables,
counters or policy agree with, and shows the oracle stated from PROTOCOL.md catches it
where the old check (the one that read the code's answer) would not, or where no other
property does.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

from quiesce.check import NO_STALL, check
from quiesce.models import ProtocolModel, ProtocolParams
from quiesce.models.implementation import Hooks
from quiesce.models.implementation import _properties as properties
from quiesce.models.implementation._properties import (
    CONFLICT_FIRST,
    NEWEST_SNAPSHOT,
    RESUME_KEPT,
)
from quiesce.models.scenarios import small_params
from quiesce.protocol.controller.lowlevel import PHASE_OPS
from quiesce.protocol.machines import CHECKPOINT, PHASE_ORDER, CallInput, CheckpointState, Phase
from quiesce.protocol.participant import AgentRole
from quiesce.protocol.wire import Receipt

# The planted bugs live inside the controller: reached by name, as a bug would be.
_phase_runner = importlib.import_module("quiesce.protocol.controller._phase_runner")
_policy = importlib.import_module("quiesce.protocol.controller._policy")
_restore_flow = importlib.import_module("quiesce.protocol.controller._restore_flow")

ONE_ROLLOUT = small_params()


def _violated(params: dict[str, Any], hooks: Hooks | None = None) -> set[str]:
    """The properties the exhaustive check of `params` finds violated."""
    model = ProtocolModel(ProtocolParams(**params), hooks=hooks or Hooks())
    result = check(model, stop_on_violation=False)
    assert result.complete
    return {v.property for v in result.violations}


# ============================================================================ I5


def _swapped_prepare() -> Any:
    """`machines.PHASE_ORDER` with agents prepared before the policy."""
    policy, agent, resources = PHASE_ORDER[Phase.PREPARE]
    return MappingProxyType({**PHASE_ORDER, Phase.PREPARE: (agent, policy, resources)})


def test_i5_catches_a_wrong_order_in_the_table_the_coordinator_walks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The planted bug: the §3 table itself is wrong (the coordinator's default policy
    # reads it when it is built).
    swapped = _swapped_prepare()
    monkeypatch.setattr(_policy, "PHASE_ORDER", swapped)
    assert _violated(ONE_ROLLOUT) == {"I5"}
    # The old I5 derived its order from that same table: it agrees with the bug.
    derived = {
        PHASE_OPS[phase]: tuple(slot.role for slot in swapped[phase])
        for phase in (Phase.PREPARE, Phase.COMMIT, Phase.RESUME, Phase.RESTORE)
    }
    monkeypatch.setattr(properties, "_PHASE_ORDER", derived)
    assert _violated(ONE_ROLLOUT) == set()


# ============================================================================ I7


def _never_reset(data: Any, _arg: object) -> Any:
    """M1's `completed` update with the bug: a published attempt leaves the run of
    failures as it was."""
    return replace(data, attempt=None, skips=0)


# A failed attempt, a completed one, a failed one: one failure in a row, never two.
FAIL_COMPLETE_FAIL = small_params(triggers=3, max_consecutive_failures=1)


def test_i7_recounts_the_failures_from_the_outcomes_not_from_m1() -> None:
    assert _violated(FAIL_COMPLETE_FAIL) == set()
    planted = CHECKPOINT.derive("never_reset", updates={"completed": _never_reset})
    model = ProtocolModel(ProtocolParams(**FAIL_COMPLETE_FAIL), hooks=Hooks(checkpoint=planted))
    violation = check(model).violation(NO_STALL)
    assert violation is not None
    last = violation.trace.states()[-1]
    assert last.system.controller.phase is CheckpointState.STOPPED
    # M1's own counter says the stop was earned (the old check read it, and agreed); the
    # outcomes say the run of failures is 1, within the budget.
    assert last.system.controller.checkpoint.data.failures > 1
    assert last.env.failures == 1


# ============================================================================ M9


_SELECT = _restore_flow.select_snapshot


def _older_match(anchor: Any, candidates: Any, **kwargs: Any) -> Any:
    """`select_snapshot` with the bug: the second-newest match when there are two."""
    newest = _SELECT(anchor, candidates, **kwargs)
    if newest.snapshot is None:
        return newest
    skip = (*kwargs.pop("rejected", ()), (str(newest.snapshot.snapshot_id), "planted"))
    older = _SELECT(anchor, candidates, rejected=skip, **kwargs)
    return newest if older.snapshot is None else older


# The fault-free prefix of both replays: one checkpoint published and released.
_ONE_CHECKPOINT = (
    "periodic trigger",
    *(
        f"deliver prepare(ck-1-1-step0) {way} {who}{answer}"
        for who in ("policy", "agent", "resources")
        for way, answer in (("->", ""), ("<-", ": ready"))
    ),
    *(
        f"deliver commit(ck-1-1-step0) {way} {who}{answer}"
        for who in ("agent", "policy", "resources")
        for way, answer in (("->", ""), ("<-", ": committed"))
    ),
    *(
        f"deliver resume(ck-1-1-step0) {way} {who}{answer}"
        for who in ("resources", "policy", "agent")
        for way, answer in (("->", ""), ("<-", ": ResumeReply"))
    ),
)


def _replay(model: ProtocolModel, labels: tuple[str, ...], state: Any = None) -> Any:
    (state,) = model.init_states() if state is None else (state,)
    for label in labels:
        moves = [after for action, after in model.successors(state) if action.label == label]
        assert moves, f"{label!r} is not enabled"
        state = moves[0]
    return state


class _From(ProtocolModel):
    """The protocol model explored from one given state (the end of a replay)."""

    def __init__(self, start: Any, params: ProtocolParams, hooks: Hooks) -> None:
        super().__init__(params, hooks=hooks)
        self.start = start

    def init_states(self) -> Any:
        yield self.start


def _violated_from(start: Any, params: ProtocolParams, hooks: Hooks | None = None) -> set[str]:
    result = check(_From(start, params, hooks or Hooks()), stop_on_violation=False)
    assert result.complete
    return {v.property for v in result.violations}


def _with_a_newer_copy(model: ProtocolModel, state: Any) -> Any:
    """`state` with a second published snapshot at the same trainer step: a copy of the
    only one under the next id (the duplicate snapshot step of issue 28)."""
    store = state.system.store
    (older,) = store.published
    newer = replace(older, seq=older.seq + 1)
    copy = replace(store.contents(older), snapshot_id=newer)
    doubled = replace(store, published=store.published | {newer}).with_contents(copy)
    return model._make(replace(state.system, store=doubled), state.env)


def test_restore_must_select_the_newest_match(monkeypatch: pytest.MonkeyPatch) -> None:
    params = ProtocolParams(**small_params(siblings=0, triggers=1, faults=1, crashes=True))

    def violated() -> set[str]:
        model = ProtocolModel(params)
        two = _with_a_newer_copy(model, _replay(model, _ONE_CHECKPOINT))
        crashed = _replay(model, ("controller crashes",), two)
        return _violated_from(crashed, params)

    with monkeypatch.context() as planted:
        planted.setattr(_restore_flow, "select_snapshot", _older_match)
        outcomes = [violated()]
    outcomes.append(violated())
    # Restoring the older copy is consistent, bounded and rolls back cleanly: only the M9
    # oracle knows the newer one had to be taken.
    assert outcomes == [{NEWEST_SNAPSHOT}, set()]


_REAL_READ = _phase_runner.read_reply


def _conflict_as_refusal(op: Any, op_id: Any, result: Any, *, conflicting: bool = False) -> Any:
    """`read_reply` with the bug: a conflict read as a plain refusal (its id never aborted)."""
    read = _REAL_READ(op, op_id, result, conflicting=conflicting)
    if read[0] is CallInput.RECV_CONFLICT:
        return CallInput.RECV_REFUSAL, read[1]
    return read


def test_a_conflict_naming_x_is_followed_by_the_abort_of_x(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two controller crashes, each mid-restore: the third controller's restore meets the
    # policy still fenced to the second one's restore id (a conflict needs two faults).
    params = ProtocolParams(**small_params(siblings=0, triggers=2, faults=2, crashes=True))
    labels = (
        *_ONE_CHECKPOINT,
        "controller crashes",
        "deliver restore(rs-2-1-step0) -> policy",
        "controller crashes",
        "deliver restore(rs-3-1-step0) -> policy",
    )

    def violated() -> set[str]:
        model = ProtocolModel(params)
        return _violated_from(_replay(model, labels), params)

    with monkeypatch.context() as planted:
        planted.setattr(_phase_runner, "read_reply", _conflict_as_refusal)
        outcomes = [violated()]
    outcomes.append(violated())
    # The oracle names the call that breaks §4 when it is sent; the fence left hanging is
    # also, later, an I3 violation and a stall (this bug is not invisible to the rest).
    assert CONFLICT_FIRST in outcomes[0]
    assert outcomes[1] == set()


# ============================================================================ M9 resumes


_DISCARD_PLAN = _restore_flow.RestoreFlow.discard_plan


def _forgets_the_discards(flow: Any) -> None:
    """`RestoreFlow.discard_plan` with the bug: the discards are sent, but the list the
    redispatch keeps continuations by forgets them."""
    _DISCARD_PLAN(flow)
    flow.update(discards=())


# A rollout of two turns parked at the end of its first, a checkpoint published, and the
# controller crashing before the rollout ends.
_PARKED_AT_TURN_ONE = (
    "periodic trigger",
    "deliver prepare(ck-1-1-step0) -> policy",
    "deliver prepare(ck-1-1-step0) <- policy: ready",
    "deliver prepare(ck-1-1-step0) -> agent",
    "deliver prepare(ck-1-1-step0) <- agent: not_ready",
    "turn g0/0#0 ends turn 1",
)
_PUBLISHED_THEN_CRASH = (
    "timer prepare_retry:ck-1-1-step0",
    "deliver prepare(ck-1-1-step0) -> agent",
    "deliver prepare(ck-1-1-step0) <- agent: ready",
    "deliver prepare(ck-1-1-step0) -> resources",
    "deliver prepare(ck-1-1-step0) <- resources: ready",
    *(
        f"deliver commit(ck-1-1-step0) {way} {who}{answer}"
        for who in ("agent", "policy", "resources")
        for way, answer in (("->", ""), ("<-", ": committed"))
    ),
    *(
        f"deliver resume(ck-1-1-step0) {way} {who}{answer}"
        for who in ("resources", "policy", "agent")
        for way, answer in (("->", ""), ("<-", ": ResumeReply"))
    ),
    "controller crashes",
)


def _depending_on_restart_only(model: ProtocolModel, state: Any) -> Any:
    """`state` with every agent execution marked as depending on a `restart_only` resource
    (the model's turns never mark one: its continuations are never discarded)."""
    participants = []
    for participant in state.system.participants:
        role = participant.role
        for execution in getattr(role, "executions", ()):
            data = replace(execution.data, restart_only_dependency=True)
            role = role._with(replace(execution, data=data))
        participants.append(replace(participant, role=role))
    return model._make(replace(state.system, participants=tuple(participants)), state.env)


def test_nothing_resumes_from_a_discarded_continuation(monkeypatch: pytest.MonkeyPatch) -> None:
    # export_restore keeps the restore level at `turn`, so a kept continuation would resume.
    params = ProtocolParams(
        **small_params(turns=2, faults=1, crashes=True, recovery_mode="export_restore")
    )

    def violated() -> set[str]:
        model = ProtocolModel(params)
        parked = _depending_on_restart_only(model, _replay(model, _PARKED_AT_TURN_ONE))
        return _violated_from(_replay(model, _PUBLISHED_THEN_CRASH, parked), params)

    with monkeypatch.context() as planted:
        planted.setattr(_restore_flow.RestoreFlow, "discard_plan", _forgets_the_discards)
        outcomes = [violated()]
        # The agent refuses a begin that claims a continuation it no longer holds, and the
        # rollout is retried: nothing is lost, so without the oracle the bug passes.
        planted.setattr(properties, "may_resume_from", lambda *_: True)
        outcomes.append(violated())
    outcomes.append(violated())
    assert outcomes == [{RESUME_KEPT}, set(), set()]


# ============================================================================ M3 receipts


_ACK = AgentRole.ack


def _acks_every_held_result(role: AgentRole, rules: Any, receipts: Any) -> Any:
    """`AgentRole.ack` with the bug: a batch releases every completed result the agent
    holds, the ones it quotes and the ones it does not."""
    held = [
        Receipt(rollout_id=e.data.rollout_id, attempt=e.data.attempt, receipt=e.data.receipt)
        for e in role.completed()
    ]
    return _ACK(role, rules, [*receipts, *held])


def test_only_an_ack_quoting_the_exact_receipt_releases_a_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two siblings: the second completes while the first one's ACK batch is in flight.
    params = small_params(siblings=2, triggers=0)
    with monkeypatch.context() as planted:
        planted.setattr(AgentRole, "ack", _acks_every_held_result)
        outcomes = [_violated(params)]
        # Released results leave an acked refusal key and the controller seals every
        # completion it hears of: without the exact-receipt rule nothing else objects.
        planted.setattr(properties, "released_by_ack", lambda *_: True)
        outcomes.append(_violated(params))
    outcomes.append(_violated(params))
    assert outcomes == [{"I1"}, set(), set()]
