"""I7's failure count (PROTOCOL.md §4, §5): `max_consecutive_failures` counts attempts that
failed after their retries, so a failing abort, retried by its own timer, counts nothing.

The replayed walk is the counterexample `quiesce check protocol --faults 2 --swarm 8
--walks 25` found (its ACK deliveries since adapted to one background batch per agent in
flight): a prepare deadline fails the first attempt, a second prepare deadline
fails the next one, then the policy crashes during its abort and the retried abort is lost.
The coordinator used to count each failed abort too (4 > 3: `stopped`) where the judge saw
3 failure outcomes, so `stopped` was a stall. Two failed attempts do not stop the run: the
abort stays pending, and its retry timer finishes it.
"""

from __future__ import annotations

from quiesce.check import NO_STALL, check
from quiesce.models import ProtocolModel, ProtocolParams
from quiesce.models.implementation import Hooks, PState
from quiesce.models.scenarios import small_params
from quiesce.protocol.machines import CHECKPOINT, CheckpointState
from tests.models.planted_bugs import count_every_failure

_COUNTEREXAMPLE = (
    "periodic trigger",
    "deliver prepare(ck-1-1-step0) -> policy",
    "timer prepare_deadline:ck-1-1-step0",
    "optimizer step begins",
    "turn g0/0#0 ends turn 1",
    "finish g0/0#0",
    "deliver resume(ck-1-1-step0) -> policy",
    "optimizer step ends at 1",
    "weight sync begins",
    "deliver prepare(ck-1-1-step0) <- policy: ready",
    "weight sync ends",
    "turn g0/1#0 ends turn 1",
    "train switch begins",
    "deliver resume(ck-1-1-step0) <- policy: ResumeReply",
    "deliver ack(1) -> agent",
    "train switch ends",
    "deadline of g0 expires",
    "turn g0/1#1 ends turn 1",
    "finish g0/1#0",
    "trainer boundary at step 1",
    "deliver retire(g0/1#0) -> agent",
    "deliver retire(g0/1#0) <- agent: RetireReply",
    "deliver ack(ck-1-2-step1) -> agent",
    "deliver ack(1) <- agent: AckReply",  # the next background batch goes
    "deliver ack(ck-1-2-step1) <- agent: AckReply",
    "deliver prepare(ck-1-2-step1) -> policy",
    "deliver ack(1) -> agent",
    "timer prepare_deadline:ck-1-2-step1",
    "deliver ack(1) <- agent: AckReply",
    "policy crashes",  # fault 1: the abort of ck-1-2-step1 fails
    "timer retry:ck-1-2-step1",
    "request lost: resume(ck-1-2-step1) -> policy",  # fault 2: the retried abort fails
    "finish g0/1#1",
)
# With no further faults: the retry timer sends the abort again, and it succeeds.
_FINISH_THE_ABORT = (
    "timer retry:ck-1-2-step1",
    "deliver resume(ck-1-2-step1) -> policy",
    "deliver resume(ck-1-2-step1) <- policy: ResumeReply",
)


def _replay(model: ProtocolModel, state: PState, labels: tuple[str, ...]) -> PState:
    for label in labels:
        moves = [after for action, after in model.successors(state) if action.label == label]
        assert moves, f"{label!r} is not enabled"
        state = moves[0]  # equal labels (a message sent twice) lead to equal states
    return state


def test_a_failing_abort_is_not_another_failed_attempt() -> None:
    model = ProtocolModel(ProtocolParams(faults=2))
    (initial,) = model.init_states()
    state = _replay(model, initial, _COUNTEREXAMPLE)
    controller = state.system.controller
    assert controller.phase is CheckpointState.ABORT_PENDING
    # Two attempts failed (ck-1-1 ended, ck-1-2 still aborting), however often it aborted.
    assert controller.checkpoint.data.failures == 2
    assert state.env.failures == 1  # the judge counts an attempt once it has ended
    assert not model.is_goal(state)
    done = _replay(model, state, _FINISH_THE_ABORT)
    assert done.system.controller.phase is CheckpointState.IDLE and model.is_goal(done)
    assert done.env.failures == 2
    assert done.env.bad == ()


# One attempt, one fault: its abort may fail once. With a budget of one failure, counting
# that failed abort stops a run only one attempt failed in, which I7 refuses.
_ONE_FAILED_ABORT = ProtocolParams(**small_params(faults=1, max_consecutive_failures=1))


def test_the_exhaustive_check_catches_a_failed_abort_counted_as_a_failed_attempt() -> None:
    assert check(ProtocolModel(_ONE_FAILED_ABORT)).violations == ()
    counting = CHECKPOINT.derive(
        "abort_failures_count", updates={"note_cause": count_every_failure}
    )
    violation = check(ProtocolModel(_ONE_FAILED_ABORT, hooks=Hooks(checkpoint=counting))).violation(
        NO_STALL
    )
    assert violation is not None
    assert violation.trace.states()[-1].system.controller.phase is CheckpointState.STOPPED
