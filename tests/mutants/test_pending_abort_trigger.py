"""A trigger that meets a pending abort retries that abort, and the attempt then ends as an
abort (M1 row `abort_pending -TRIGGER-> aborting`, PROTOCOL.md M1 "publish-or-abort").

The generated mutant `checkpoint:abort_pending:trigger.retarget=committing` sends that row
to `committing` instead: the abort's resumes still go out with the same id, but their
`roles_done` then continues the checkpoint (capture, validate, publish). These tests kill
it, and so does the mutant stage "two triggers" (`quiesce/mutants/_stages.py`, S5's
configuration: the only exhaustive stage with a second trigger); before that stage only
the walks fired the row, each time after the trainer moved, where the capture fails again
and the attempt aborts as the protocol's.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from quiesce.check import check
from quiesce.fsm import Table
from quiesce.models import PORTFOLIO, ProtocolModel, ProtocolParams
from quiesce.models.scenarios import PORTFOLIO_BOUND
from quiesce.mutants import MUTANTS
from quiesce.protocol import Cause, Coordinator, OpId
from quiesce.protocol.controller import Outcome, PeriodElapsed, Stopped
from quiesce.protocol.controller.lowlevel import (
    CallFailed,
    CaptureCut,
    DiscardStaging,
    LocalDone,
    LocalFailed,
    LocalOp,
    Op,
    Publish,
)
from quiesce.protocol.machines import CHECKPOINT, CheckpointState
from tests.protocol.test_coordinator import NO_RETRIES, ROLES, Harness, of

S = CheckpointState

MUTANT = MUTANTS["checkpoint:abort_pending:trigger.retarget=committing"]

# Where the attempt fails, and the reason its outcome must report: before every participant
# committed (a prepare's transport error), or after (the staged digests do not match).
FAILURES = {"prepare": "io_error", "validate": "artifact_mismatch"}

# The controller's local steps, each done at once by a healthy store.
LOCAL_STEPS = {
    S.CAPTURING: LocalOp.CUT,
    S.VALIDATING: LocalOp.VALIDATE,
    S.PUBLISHING: LocalOp.PUBLISH,
}


def _abort_pending(checkpoint: Table[Any, Any], failure: str) -> tuple[Harness, OpId]:
    """An attempt failed at `failure` whose abort failed too: the harness (M1 stepped by
    `checkpoint`) in `abort_pending`, and the attempt's id."""
    h = Harness(ROLES, **NO_RETRIES)
    # The same configuration with `checkpoint` in M1's place: the harness's setup
    # (discovery, an empty store at restore) fires no row the variants differ in.
    h.c = Coordinator(h.c.config, checkpoint=checkpoint)
    h.start()
    x = h.x
    if failure == "prepare":
        h.step(CallFailed("pol", Op.PREPARE, x, Cause.IO_ERROR), 1.0)
    else:
        h.answer_all(Op.PREPARE)
        h.answer_all(Op.COMMIT)
        h.step(LocalDone(LocalOp.CUT, x))
        h.step(LocalFailed(LocalOp.VALIDATE, x, Cause.ARTIFACT_MISMATCH))
    [(first, _)] = h.calls()  # the abort resumes one role at a time: the first one fails
    h.step(CallFailed(first, Op.RESUME, x, Cause.TIMEOUT), 1.0)
    assert h.s.phase is S.ABORT_PENDING
    return h, x


def _trigger_to_the_end(h: Harness, x: OpId) -> list[Any]:
    """A trigger, then a healthy environment until the attempt ends (every call answered,
    every local step done): the effects from the trigger on."""
    effects = h.step(PeriodElapsed(), 1.0)
    for _ in range(10):
        if h.s.phase in (S.IDLE, S.STOPPED):
            return effects
        if h.s.phase in LOCAL_STEPS:
            effects += h.step(LocalDone(LOCAL_STEPS[h.s.phase], x))
        else:
            effects += h.answer_all(Op.RESUME)[1]  # the only calls left: resumes of x
    raise AssertionError(f"the attempt did not end: {h.s.phase.value}")


def _not_an_abort(h: Harness, x: OpId, effects: list[Any], reason: str) -> list[str]:
    """How the end of attempt `x` differs from an abort failed for `reason` (no
    difference: it ended as one)."""
    wrong = []
    if h.s.phase is not S.IDLE:
        wrong.append(f"ends {h.s.phase.value}")
    if DiscardStaging(x) not in effects:
        wrong.append("keeps its staging")
    wrong += [f"then {type(e).__name__}" for e in effects if isinstance(e, CaptureCut | Publish)]
    reported = [(o.result, o.reason) for o in of(effects, Outcome)]
    if reported != [("failed", reason)]:
        wrong.append(f"reports {reported}")
    return wrong


@pytest.mark.parametrize("failure", FAILURES)
def test_a_trigger_retries_the_pending_abort_and_the_attempt_ends_aborted(failure: str) -> None:
    h, x = _abort_pending(CHECKPOINT, failure)
    effects = _trigger_to_the_end(h, x)
    assert _not_an_abort(h, x, effects, FAILURES[failure]) == []


@pytest.mark.parametrize("failure", FAILURES)
def test_the_mutant_that_resumes_the_checkpoint_instead_is_caught(failure: str) -> None:
    h, x = _abort_pending(MUTANT.hooks().checkpoint, failure)
    effects = _trigger_to_the_end(h, x)
    wrong = _not_an_abort(h, x, effects, FAILURES[failure])
    if failure == "prepare":
        # Nobody committed: the cut is taken, validation finds no manifest, and the run
        # stops on a fatal topology mismatch after one retryable failure (I7).
        assert wrong == [
            "ends stopped",
            "keeps its staging",
            "then CaptureCut",
            "reports [('failed', 'invariant_error')]",
        ]
        [stopped] = of(effects, Stopped)
        assert (stopped.reason, stopped.cause) == ("invariant_error", "topology_mismatch")
    else:
        # Everyone committed: the id its participants were just resumed from (aborted) is
        # published and reported completed (I8: no fence is committed to it any more), and
        # the failure count is reset.
        assert wrong == [
            "keeps its staging",
            "then CaptureCut",
            "then Publish",
            "reports [('completed', 'completed')]",
        ]
        assert h.s.checkpoint.data.failures == 0


def test_the_s5_configuration_kills_it_by_no_stall() -> None:
    # S5's portfolio configuration (a prepare times out, its abort is lost, a second trigger
    # comes; the trainer never moves) holds every property unmutated (`test_portfolio`).
    [entry] = [e for e in PORTFOLIO if e.scenario == "S5"]
    assert entry.params is not None
    model = ProtocolModel(ProtocolParams(**entry.params), hooks=MUTANT.hooks())
    result = check(model, max_states=PORTFOLIO_BOUND, stop_on_violation=True)
    [violation] = result.violations
    assert violation.property == "no_stall"
    phases = [step.state.system.controller.phase for step in violation.trace.steps]
    assert (S.ABORT_PENDING, S.COMMITTING) in pairwise(phases)
    assert phases[-1] is S.STOPPED
