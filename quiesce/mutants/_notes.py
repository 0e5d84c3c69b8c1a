"""Why each generated mutant that the stages reach and do not kill still survives.

What lives here: `SURVIVOR_NOTES`, one justification per surviving reached generated mutant
(`quiesce mutants --verify --all` lists every survivor with its note), and `survivor_note`.
Each note says what the mutant changes, why no stage sees it, and which kind of survivor it
is: *equivalent* in everything the model observes, or a *blind spot* (of the stages' reach,
or of the implementation model's properties) with the check that would kill it. A survivor
not listed here is new: `survivor_note` says so, and it deserves a look.

Each note is keyed by its mutant's name (`_names`: the row's table, sources, input and
guard, and the change), built here from the row a state, an input and a guard select
(`_retarget`, `_drop_guard`), never typed with a row index: a row inserted elsewhere moves
no note, a row no longer in its table raises `LookupError` at import, and `check_notes`
(called as the catalog is built) refuses a key that names no generated mutant.

Two facts most checkpoint notes rest on (`quiesce.protocol.controller._checkpoint_work`):
the outcome an attempt reports is `completed` exactly when its snapshot was published,
whichever path it ends by; and a release and an abort are both a resume with the attempt's
id. So swapping the release path for the abort path (or back) changes only the bookkeeping
at the end: releasing's `roles_done` resets the consecutive-failure count (`completed`)
and discards nothing; aborting's keeps the count (`finished`), discards the staging, and may
stop over budget.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from enum import Enum
from typing import Any

from quiesce.fsm import Table
from quiesce.mutants._names import mutant_name, row_index, row_key
from quiesce.protocol.machines import (
    AGENT_EXECUTION,
    CHECKPOINT,
    CONTROL_FENCE,
    AgentInput,
    CheckpointInput,
    CheckpointState,
    ExecState,
    FenceInput,
    FenceState,
)

__all__ = ["SURVIVOR_NOTES", "check_notes", "survivor_note"]

# ------------------------------------------------------------------ naming a row's mutants


def _key(table: Table[Any, Any], source: Enum, input: Enum, guard: str | None = None) -> str:
    """The key of the row `input` fires from `source` when `guard` holds (`_names`)."""
    return row_key(table, row_index(table, source, input, guard))


def _retarget(
    table: Table[Any, Any], source: Enum, input: Enum, guard: str | None = None, *, to: str
) -> str:
    """The mutant sending the row `input` fires from `source` (when `guard` holds) to `to`."""
    return mutant_name(table, row_index(table, source, input, guard), "retarget", to)


def _drop_guard(table: Table[Any, Any], source: Enum, input: Enum, guard: str) -> str:
    """The mutant dropping the guard `guard` of the row `input` fires from `source`."""
    return mutant_name(table, row_index(table, source, input, guard), "drop_guard")


def _retargets(
    table: Table[Any, Any],
    source: Enum,
    input: Enum,
    notes: Mapping[str, str],
    targets: Iterable[str],
    *,
    guard: str | None = None,
) -> dict[str, str]:
    """The note of each retarget of the row `input` fires from `source` to one of
    `targets` (each target's note in `notes`)."""
    return {_retarget(table, source, input, guard, to=target): notes[target] for target in targets}


# ------------------------------------------------------------------ checkpoint (M1)

_ABORT_FAILED = _key(CHECKPOINT, CheckpointState.ABORTING, CheckpointInput.FAILED)
_ABORT_RETRIED = _key(CHECKPOINT, CheckpointState.ABORT_PENDING, CheckpointInput.RETRY_DUE)
_RELEASE_FAILED = _key(CHECKPOINT, CheckpointState.RELEASING, CheckpointInput.FAILED)
_RELEASE_RETRIED = _key(CHECKPOINT, CheckpointState.RELEASE_PENDING, CheckpointInput.RETRY_DUE)

_ENDS_AS_RELEASE = (
    "blind spot (reach): the abort round ends through releasing's row, so its staging is"
    " not discarded and the consecutive-failure count is reset; the calls (a resume with"
    " the same id) and the outcome (`failed`: nothing was published) are the protocol's."
    " I3 sees the staging left behind only for an attempt aborted after its commit whose"
    " abort call then failed (two faults, or a trainer step and a fault): the design"
    f" stage with two faults kills this retarget of the rows {_ABORT_FAILED} and"
    f" {_ABORT_RETRIED} (I3 and I6 fail there), but this row needs a second trigger too,"
    " which it lacks (the two-trigger stage has one fault). I7's stop rule sees the reset"
    " count only after `max_consecutive_failures` more failures, which no stage makes"
)
_ENDS_AS_ABORT = (
    "blind spot (reach): a published attempt's release round ends through aborting's row:"
    " the calls (a resume with the same id) and the outcome (`completed`, it was"
    " published) are the protocol's, and the staging it discards is already empty; only the"
    " consecutive-failure count is kept instead of reset (and the row may stop over budget"
    " after a success). I7's stop rule sees that only after `max_consecutive_failures` more"
    " failed attempts, which no stage makes after a success (in the two-trigger stage, the"
    " only one with a trigger after the release failed, that failure spent its one fault;"
    " the two-agent stage spends both its faults on the one round). The design stage with"
    f" two faults kills this retarget of the rows {_RELEASE_FAILED} and {_RELEASE_RETRIED}"
    " (I3 and I6 fail there), but does not reach these rows"
)

_CHECKPOINT: Mapping[str, str] = {
    _retarget(
        CHECKPOINT, CheckpointState.RELEASE_PENDING, CheckpointInput.FAILED, to="abort_pending"
    ): _ENDS_AS_ABORT,
    _retarget(
        CHECKPOINT, CheckpointState.ABORT_PENDING, CheckpointInput.TRIGGER, to="releasing"
    ): _ENDS_AS_RELEASE,
    _retarget(
        CHECKPOINT, CheckpointState.RELEASE_PENDING, CheckpointInput.TRIGGER, to="aborting"
    ): _ENDS_AS_ABORT,
    # The RESTARTED rows (issue 23): what a participant restart costs the attempt (S19).
    _drop_guard(
        CHECKPOINT, CheckpointState.PREPARING, CheckpointInput.RESTARTED, "in_turn"
    ): "blind spot (reach): every restart seen while preparing"
    " prepares that participant again instead of only one of the role being prepared: an"
    " untouched one sees nothing (the call again goes out only for a call already"
    " answered), and one of an earlier role is prepared again after a later role was"
    " called. Its fence is durable (§6) and its parked work was retried at the live level,"
    " so the snapshot stays consistent; what the row's guard keeps is §3's order, which the"
    " System machine's I5 reads (a later role's call sent while an earlier one's is in"
    " flight). No stage makes a restart of an earlier role after a later role answered:"
    " the exhaustive stages' crash is seen on the next call to that participant, in its"
    " turn, and the walks rarely make it",
    _drop_guard(
        CHECKPOINT, CheckpointState.PREPARING, CheckpointInput.RESTARTED, "touched"
    ): "equivalent (safety), a goodput loss: a restart of a"
    " participant the attempt never called fails the attempt, as every restart did before"
    " S19 was refined; the abort goes out with the same id to whoever was attempted, so no"
    " invariant breaks. What it costs is an attempt per such restart, which the goodput"
    " gate (`benchmarks/bench_faults.py --quick`, with restarts) measures, not a model",
}

# ------------------------------------------------------------------ control fence (M2)

_RETIRED = _key(CONTROL_FENCE, FenceState.IDLE, FenceInput.RECV_RESUME)
"""The row of a resume with no guard: it retires the fence to idle from every state."""

_FENCE: Mapping[str, str] = {
    **{
        _retarget(
            CONTROL_FENCE, FenceState.COMMITTING, FenceInput.COMMIT_FAILED, "same_id", to=target
        ): "equivalent (in the design model): a"
        f" failed commit leaves the fence {target} instead of prepared; the controller"
        " fails the attempt on that reply and its abort, a resume with the same id, retires"
        f" the fence to idle from every state ({_RETIRED}), so the state in between is met only"
        " by another call of that id meanwhile. Only the design stage with two faults"
        " reaches the row (a commit failing on a participant that is not quiescent);"
        " not analysed further"
        for target in (
            "idle",
            "preparing",
            "committing",
            "committed_paused",
            "restoring",
            "restore_failed_paused",
            "restored_paused",
        )
    },
}

# ------------------------------------------------------------------ agent execution (M3)

_HELD_ROW = _key(AGENT_EXECUTION, ExecState.RUNNING, AgentInput.POLICY_CALL_HELD)
"""The row of a turn's policy call held by the paused policy: the execution freezes."""

_HELD = (
    " Only the design stage reaches the row (a turn's policy call held while the policy is"
    " paused for a checkpoint)"
)
_HELD_STALLS = (
    "blind spot (properties): the execution whose policy call was held leaves the live"
    " states (or stays frozen past the policy's resume); its rollout makes no more"
    " progress, the group's deadline then abandons the group, and I9 (every group trained"
    " *or counted abandoned*) accepts that, while nothing completed is lost or run twice"
    " (I1, I2). A goal asking that a group no fault touched is trained would kill it." + _HELD
)
_HELD_RUNS_ON = (
    "equivalent (in the design model): the execution is not frozen and runs on (or parks"
    " at its next turn boundary, as asked); the design model's calls are atomic, so the"
    " held call's later release (the policy's resume, refused for an execution that is not"
    " frozen) changes nothing it observes; the checkpoint counts the execution at prepare"
    " as it counts any running one." + _HELD
)
_HELD_PARKS = (
    "equivalent (in the design model): the held execution is parked instead of frozen;"
    " the agent's commit saves parked and frozen executions alike, and the fence's resume"
    " wakes a parked one as the policy's resume wakes a frozen one." + _HELD
)
_HELD_DONE = (
    "blind spot (properties): the execution counts as completed without running its"
    " remaining turns or reporting a result; no property compares a completion with the"
    " turns it ran (not analysed further)." + _HELD
)
_HELD_TARGETS: Mapping[str, str] = {
    "new": _HELD_STALLS,
    "running": _HELD_RUNS_ON,
    "park_requested": _HELD_RUNS_ON,
    "parked": _HELD_PARKS,
    "frozen": _HELD_STALLS,
    "completed": _HELD_DONE,
    "acked": _HELD_STALLS,
    "tombstoned": _HELD_STALLS,
}


_AGENT: Mapping[str, str] = {
    # A turn's policy call is held by the paused policy: the execution freezes.
    **_retargets(
        AGENT_EXECUTION,
        ExecState.RUNNING,
        AgentInput.POLICY_CALL_HELD,
        _HELD_TARGETS,
        ("new", "running", "park_requested", "parked", "completed", "acked", "tombstoned"),
    ),
    # The policy resumes and releases the frozen execution (to park_requested while the
    # agent's fence is still closed, else to running).
    _drop_guard(
        AGENT_EXECUTION, ExecState.FROZEN, AgentInput.POLICY_RESUMED, "fence_closed"
    ): "blind spot (properties): a released execution is"
    " asked to park even when the agent's fence is open, so it parks at its next turn"
    " boundary with no checkpoint to resume it; the group's deadline abandons the group,"
    f" which I9 accepts (see the retargets of {_HELD_ROW})." + _HELD,
    **_retargets(
        AGENT_EXECUTION,
        ExecState.FROZEN,
        AgentInput.POLICY_RESUMED,
        _HELD_TARGETS,
        ("new", "running", "parked", "frozen", "completed", "acked", "tombstoned"),
        guard="fence_closed",
    ),
    **_retargets(
        AGENT_EXECUTION,
        ExecState.FROZEN,
        AgentInput.POLICY_RESUMED,
        _HELD_TARGETS,
        ("new", "park_requested", "parked", "frozen", "completed", "acked", "tombstoned"),
    ),
    # A retire tombstones an execution the coordinator gave up on.
    _retarget(
        AGENT_EXECUTION, ExecState.NEW, AgentInput.RETIRE, to="acked"
    ): "equivalent (in the participant): a retired execution becomes acked instead of"
    " tombstoned; both leave the agent's executions at once and keep only the rollout's"
    " refusal key, with an empty receipt either way (an execution still running has none),"
    " so every later request of that key (a `begin`, a retire, an ACK, a late `boundary` or"
    " `finish`) is answered alike. The participant stage's kit programs make those"
    " requests, and see no difference",
}

SURVIVOR_NOTES: Mapping[str, str] = {**_CHECKPOINT, **_FENCE, **_AGENT}
"""Surviving reached generated mutant -> why no stage kills it, and what kind it is. Each
key is built from its row (`_retarget`, `_drop_guard`: a row no longer in its table raises
`LookupError` here), and `check_notes` refuses one that names no generated mutant."""


def check_notes(notes: Mapping[str, str], generated: Collection[str]) -> None:
    """Raise `LookupError` if a key of `notes` names none of the `generated` mutants (a row
    changed, or a retarget to the row's own target): its note would silently annotate
    nothing while its mutant, if it survives, goes unreviewed. `_catalog` calls it on
    `SURVIVOR_NOTES` when the catalog is built."""
    stale = sorted(name for name in notes if name not in generated)
    if stale:
        raise LookupError(
            "survivor notes for no generated mutant (quiesce/mutants/_notes.py): "
            + ", ".join(stale)
        )


def survivor_note(name: str) -> str:
    """The justification of surviving mutant `name`, or a request to review it."""
    return SURVIVOR_NOTES.get(
        name, "not reviewed: a new survivor (add its note to quiesce/mutants/_notes.py)"
    )
