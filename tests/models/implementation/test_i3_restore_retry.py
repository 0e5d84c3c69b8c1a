"""I3 is judged once the controller is `idle`, and a restarted controller is idle only when
its restore (M9) is (issue 28, part 4; PROTOCOL.md §5 I3, §6, M9).

The trace: a checkpoint completes (published and released everywhere), the controller
crashes, the new one restores (M9 `restoring`, admission held by `restore`), the policy
restores and its reply is lost. The checkpoint table (M1) is idle, but the controller is
not: M9 has a restore retry armed (`restore_retry`, the same op id) and the policy is
fenced to the restore id `rs-2-1` until that retry reaches it. The protocol model's I3 used
to read "the controller is idle" as "M1 is idle" and failed here; the design model and the
system run already read it as "M1 idle and no M9 under way". Nothing is wrong with the
protocol: `ck-1-1` is published and released, and once M9 settles (no more faults) every
fence is idle again and admission open. These tests pin both halves.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from quiesce.models import ProtocolModel, ProtocolParams
from quiesce.models.implementation import PState
from quiesce.models.implementation._state import CONTROL_OPS
from quiesce.protocol.machines import CheckpointState, FenceState, RestoreState

# `quiesce check protocol --set siblings=0 --set turns=1 --set attempts=1 --set triggers=2
# --set optimizer_steps=0 --set weight_sync=0 --set train_switch=0 --faults 2`: the
# configuration whose first counterexample this was.
PARAMS = ProtocolParams(
    siblings=0,
    turns=1,
    attempts=1,
    triggers=2,
    optimizer_steps=0,
    weight_sync=0,
    train_switch=0,
    faults=2,
)

CK = "ck-1-1-step0"
RS = "rs-2-1-step0"
ORDER = {
    "prepare": ("policy", "agent", "resources"),
    "commit": ("agent", "policy", "resources"),
    "resume": ("resources", "policy", "agent"),
}
# The 22 steps of the counterexample, as the explorer printed them.
TRACE = [
    "periodic trigger",
    *(
        label
        for op in ("prepare", "commit", "resume")
        for role in ORDER[op]
        for label in (
            f"deliver {op}({CK}) -> {role}",
            f"deliver {op}({CK}) <- {role}: "
            + {"prepare": "ready", "commit": "committed", "resume": "ResumeReply"}[op],
        )
    ),
    "controller crashes",
    f"deliver restore({RS}) -> policy",
    f"reply lost: restore({RS}) <- policy: restored",
]


def _model() -> ProtocolModel:
    return ProtocolModel(PARAMS)


def _replay(model: ProtocolModel) -> list[PState]:
    """The states of the trace, the initial one first (each step found by its label)."""
    [state] = list(model.init_states())
    states = [state]
    for label in TRACE:
        moves = [s for a, s in model.successors(state) if a.label == label]
        assert moves, f"no step {label!r}; offered: {[a.label for a in model.actions(state)]}"
        state = moves[0]
        states.append(state)
    return states


def _holds(model: ProtocolModel, name: str, state: PState) -> bool:
    return next(p for p in model.properties() if p.name == name).holds(state)


def _m1_idle_reading(state: PState) -> bool:
    """The I3 of before the fix: due whenever M1 is idle (M9 not consulted)."""
    sys = state.system
    if sys.controller.phase is not CheckpointState.IDLE:
        return True
    if any(m.call.op in CONTROL_OPS for m in sys.messages):
        return True
    return all(p.fence.state is FenceState.IDLE for p in sys.participants)


def test_the_trace_is_a_restore_retry_pending_not_an_idle_controller() -> None:
    model = _model()
    states = _replay(model)
    assert len(TRACE) == 22
    last = states[-1]
    sys = last.system
    controller = sys.controller
    # M1 is idle, and ck-1-1 was published and released before the crash.
    assert controller.phase is CheckpointState.IDLE
    assert [str(x) for x in sys.store.published] == [CK] and sys.store.intent is None
    assert all(str(p.fence.data.high_watermark) == CK for p in sys.participants)
    # ... but M9 is restoring: admission held by the restore, a same-id retry armed.
    assert controller.restore is not None and controller.restore.state is RestoreState.RESTORING
    assert set(controller.gate.data) == {"restore"}
    assert [name for name, _ in sys.timers] and all(
        str(name) == f"restore_retry:{RS}" for name, _ in sys.timers
    )
    policy = sys.participant("policy")
    assert policy.fence.state is FenceState.RESTORED_PAUSED and str(policy.fence.data.active) == RS
    assert not sys.messages
    # The M1-only reading of I3 failed exactly here, and only here on the trace.
    assert [_m1_idle_reading(s) for s in states] == [True] * 22 + [False]
    # I3 as §5 states it is not yet due; every other property holds too.
    for prop in model.properties():
        assert all(prop.holds(s) for s in states), prop.name
    assert model.describe_state(last)["restore"] == "restoring"


def test_once_the_restore_settles_i3_holds_and_every_fence_is_idle() -> None:
    # The fault budget is spent at the end of the trace: every path on from there is
    # fault-free. Exhaust them: every property holds in every state, and every state with no
    # move left is I7's goal (idle, admission open, no fence held) with I3 due and true.
    model = _model()
    start = _replay(model)[-1]
    assert start.env.faults == 0
    seen: set[Any] = {start}
    queue = deque([start])
    settled = 0
    while queue:
        state = queue.popleft()
        for prop in model.properties():
            assert prop.holds(state), (prop.name, model.describe_state(state))
        successors = [s for _, s in model.successors(state)]
        if not successors:
            assert model.is_goal(state), model.describe_state(state)
            restore = state.system.controller.restore
            assert restore is not None and restore.state is RestoreState.IDLE
            assert _m1_idle_reading(state) and _holds(model, "I3", state)
            assert CK in {str(x) for x in state.system.store.published}
            settled += 1
        for after in successors:
            if after not in seen:
                seen.add(after)
                queue.append(after)
    assert settled > 0
