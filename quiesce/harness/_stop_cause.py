"""Why a controller stopped, as PROTOCOL.md §4 (amended) asks a stop to say: the participant
and the cause of the last failure, after how many consecutive failures.

What lives here: `StopCause` (that account, as JSON) and `StopWitness`, an observer of one
controller's steps that remembers, for the checkpoint attempt in flight, the input that made
it fail (whose call, which call), keeps that account of every failed attempt (`failures`:
what a goodput benchmark breaks its failures down by) and, when `Stopped` is emitted, writes
the account.
What it does not know: anything the coordinator does not show. It reads the inputs, effects
and states as the driver passes them by, and never decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from quiesce.protocol.controller import (
    ControllerEffect,
    ControllerInput,
    ControllerState,
    Outcome,
    Stopped,
)
from quiesce.protocol.controller.lowlevel import CallFailed, LocalFailed, Reply, TimerDue
from quiesce.protocol.wire import OpId

__all__ = ["AttemptFailure", "StopCause", "StopWitness"]


class StopCause(BaseModel):
    """Why the controller stopped.

    `reason` is the coordinator's (`max_consecutive_failures`, `invariant_error`, ...);
    `failures` the consecutive failures it counted (`Outcome.consecutive_failures`);
    `checkpoint_id`, `cause`, `participants` and `op` describe the last failed attempt: its
    first failure's §4 cause, whose call failed (several participants: not ready at the
    prepare deadline) and which call (`prepare`, `commit`, ...; a store operation when the
    controller's own store failed).

    >>> cause = StopCause(reason="max_consecutive_failures", failures=4,
    ...                   checkpoint_id="ck-1-3-step4", cause="reply_lost",
    ...                   participants=["agent-0"], op="prepare")
    >>> for part in cause.describe().split("; "):
    ...     print(part)
    max_consecutive_failures after 4 consecutive failures
    the last checkpoint, ck-1-3-step4, failed on reply_lost at agent-0 (prepare)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str
    failures: int
    checkpoint_id: str | None = None
    cause: str | None = None
    participants: list[str] = []
    op: str | None = None

    def describe(self) -> str:
        """One line for people."""
        text = f"{self.reason} after {self.failures} consecutive failures"
        if self.checkpoint_id is None:
            return text
        text += f"; the last checkpoint, {self.checkpoint_id}, failed"
        if self.cause is not None:
            text += f" on {self.cause}"
        if self.participants:
            text += " at " + ", ".join(self.participants)
        if self.op is not None:
            text += f" ({self.op})"
        return text


@dataclass(frozen=True, slots=True)
class _Blame:
    """The first failure of one attempt: its cause and whose call it was."""

    checkpoint_id: OpId
    cause: str | None
    participants: tuple[str, ...]
    op: str | None


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """Why one checkpoint attempt failed: its first failure's §4 `cause`, whose call it was
    (`participants`) and which call or phase (`op`: `prepare`, `commit`, `ack`, ...; None
    when no call was to blame).

    >>> AttemptFailure("participant_restarted", ("agent-0",), "prepare").label
    'participant_restarted at prepare'
    """

    cause: str
    participants: tuple[str, ...]
    op: str | None

    @property
    def label(self) -> str:
        """`<cause> at <op>`: what a breakdown of failures counts."""
        return self.cause if self.op is None else f"{self.cause} at {self.op}"


class StopWitness:
    """A driver observer (`Observer`): after the controller stopped, `cause` says why.

    One witness per controller process; `cause` stays None while the controller runs.
    `failures` holds, by checkpoint id, why each failed attempt failed (the latest failed
    outcome of an id: a release retried after a failure may still complete it).
    """

    def __init__(self) -> None:
        self.cause: StopCause | None = None
        self.failures: dict[str, AttemptFailure] = {}
        self._before: ControllerState | None = None
        self._blame: _Blame | None = None  # the current attempt's first failure
        self._failed: tuple[Outcome, _Blame] | None = None  # the last failed attempt

    def __call__(
        self, event: ControllerInput, effects: tuple[ControllerEffect, ...], state: ControllerState
    ) -> None:
        attempt = state.attempt
        if (
            attempt is not None
            and attempt.cause is not None
            and (self._blame is None or self._blame.checkpoint_id != attempt.op_id)
        ):
            # The attempt has just begun to fail: this input is its first failure.
            self._blame = self._blame_of(event, attempt.op_id, attempt.cause.cause.value)
        for effect in effects:
            if isinstance(effect, Outcome) and effect.result == "failed":
                blame = self._blame
                if blame is None or blame.checkpoint_id != effect.checkpoint_id:
                    # It failed and ended within this one step: this input is the failure.
                    blame = self._blame_of(event, effect.checkpoint_id, None)
                self._failed = (effect, blame)
                self.failures[str(effect.checkpoint_id)] = AttemptFailure(
                    blame.cause or effect.reason, blame.participants, blame.op
                )
            elif isinstance(effect, Stopped):
                self.cause = self._account(effect, state)
        self._before = state

    def _account(self, stopped: Stopped, state: ControllerState) -> StopCause:
        if self._failed is None:
            return StopCause(reason=stopped.reason, failures=state.checkpoint.data.failures)
        outcome, blame = self._failed
        return StopCause(
            reason=stopped.reason,
            failures=outcome.consecutive_failures,
            checkpoint_id=str(outcome.checkpoint_id),
            cause=blame.cause or outcome.reason,
            participants=list(blame.participants),
            op=blame.op,
        )

    def _blame_of(self, event: ControllerInput, checkpoint_id: OpId, cause: str | None) -> _Blame:
        if isinstance(event, CallFailed):
            cause = cause or event.cause.value
            return _Blame(checkpoint_id, cause, (event.participant,), event.op.value)
        if isinstance(event, Reply):
            return _Blame(checkpoint_id, cause, (event.participant,), event.op.value)
        if isinstance(event, LocalFailed):
            return _Blame(checkpoint_id, cause or event.cause.value, (), event.op.value)
        before = self._before.attempt if self._before is not None else None
        if isinstance(event, TimerDue) and before is not None:
            # A phase deadline: the calls still unanswered (or answered "not ready") are to blame.
            waiting = {participant for participant, _ in before.waiting} | before.not_ready
            phase = None if before.phase is None else before.phase.value
            return _Blame(checkpoint_id, cause, tuple(sorted(waiting)), phase)
        return _Blame(checkpoint_id, cause, (), None)
