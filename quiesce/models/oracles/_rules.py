"""The promises the checkers judge by, each stated once, from PROTOCOL.md alone.

What lives here: literals and pure functions that say what the spec promises, written from
the text of PROTOCOL.md and never derived from the code they judge: not from
`quiesce.protocol.machines` (`PHASE_ORDER`, M1's failure counter), the cause table
(`quiesce.protocol.CAUSES`), nor the coordinator's policy objects (`CoordinatorPolicy`:
`select_snapshot`, `plan_discards`, its `phase_order`). A property that reads the code's own
table or counter agrees with every bug in it (STYLE.md, "Independent oracles"); these do
not. What it does not know: any model's state. The judges (`_protocol_properties`, the
design model, the system run) read their states and ask these.

- `SPEC_PHASE_ORDER` (§3): the roles each fenced op calls, in order.
- `reason_of`, `disposition`, `failure_run`, `stop_earned` (§4, §5 I7): the reason a cause
  reports, what an attempt's outcome does to the run of consecutive failures, recomputed
  from the log of outcomes, and when that run allows `stopped`.
- `newest_match` (M9): the snapshot a `latest` restore must select.
- `conflict_settled` (§4, S5): what a controller may send a participant that reported a
  conflict naming another id.
- `released_by_ack` (M3, S17): the only way a completed result leaves its agent.
- `may_resume_from` (M9, S12; M8): whether a redispatch may resume a continuation (only one
  its agent still keeps).

>>> SPEC_PHASE_ORDER["commit"]
('agent', 'policy', 'resources')
>>> failure_run(failure_run(0, "failed", "timeout"), "skipped", "acks_pending")
1
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "CAUSE_REASONS",
    "FAILURE_REASONS",
    "FATAL_REASON",
    "SKIP_REASONS",
    "SPEC_PHASE_ORDER",
    "Candidate",
    "conflict_settled",
    "disposition",
    "failure_run",
    "may_resume_from",
    "newest_match",
    "reason_of",
    "released_by_ack",
    "stop_earned",
]

# ============================================================================ §3 phase order

SPEC_PHASE_ORDER: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        # | prepare        | policy → agents → resources |
        "prepare": ("policy", "agent", "resources"),
        # | commit         | agents → policy (needs the agents' continuation index) → resources |
        "commit": ("agent", "policy", "resources"),
        # | restore        | policy → agents → resources |
        "restore": ("policy", "agent", "resources"),
        # | resume / abort | resources → policy → agents |  (release and abort are a resume)
        "resume": ("resources", "policy", "agent"),
    }
)
"""PROTOCOL.md §3, by the op a call carries (an abort or a release is a `resume`): the
roles, in the order they are called. Within one role calls are concurrent."""

# ============================================================================ §4 outcomes

FAILURE_REASONS = frozenset(
    {"timeout", "io_error", "participant_error", "artifact_mismatch", "participant_restarted"}
)
"""§4's reasons of a retryable failure: an attempt failed with one counts toward
`max_consecutive_failures`."""

SKIP_REASONS = frozenset(
    {
        "no_trainer_anchor",
        "optimizer_commit_in_progress",
        "trainer_state_changed",
        "nothing_mutated",
        "acks_pending",
        # Not in §4's table: a trigger before discovery answered is a precondition too.
        "not_discovered",
    }
)
"""§4's skip preconditions, by the reason an outcome reports: skipped, never failed."""

FATAL_REASON = "invariant_error"
"""§4: the one reason that stops the run at once (`stopped`)."""

CAUSE_REASONS: Mapping[str, str] = MappingProxyType(
    {
        # | call timed out / request or reply lost | `timeout` |
        "timeout": "timeout",
        "request_lost": "timeout",
        "reply_lost": "timeout",
        # | `not_ready` until the prepare deadline | `timeout` |
        "not_ready_until_deadline": "timeout",
        # | transport error, connection refused | `io_error` |
        "io_error": "io_error",
        # | participant answered 5xx | `participant_error` |
        "participant_error": "participant_error",
        # | `checkpoint_conflict` (the controller aborts the reported active id first) | ... |
        "checkpoint_conflict": "participant_error",
        # Not in §4's table: a participant that answers `failed` to commit (M2: it is back
        # in `prepared`) reports its own error, as a 5xx does.
        "commit_failed": "participant_error",
        # | staged artifact digest differs from the participant's manifest | ... |
        "artifact_mismatch": "artifact_mismatch",
        # | participant incarnation changed mid-checkpoint | `participant_restarted` |
        "participant_restarted": "participant_restarted",
        # | reply names the wrong id, topology mismatch, invariant broken in the controller |
        # A refusal naming the controller's fresh id stale, or refusing a call its phase
        # allowed, says the controller's view and the participant's diverged: the same.
        "wrong_id": FATAL_REASON,
        "stale_id": FATAL_REASON,
        "invalid_phase": FATAL_REASON,
        "topology_mismatch": FATAL_REASON,
        "invariant_broken": FATAL_REASON,
    }
)
"""PROTOCOL.md §4's table, by the name of the cause an attempt failed with: the reason its
outcome reports (a skip precondition is its own reason, `SKIP_REASONS`)."""

Disposition = Literal["retryable", "skipped", "fatal"]


def reason_of(cause: str) -> str:
    """§4's reason for an attempt that ended with the cause named `cause`.

    >>> reason_of("reply_lost"), reason_of("acks_pending"), reason_of("stale_id")
    ('timeout', 'acks_pending', 'invariant_error')
    """
    if cause in SKIP_REASONS:
        return cause
    if cause not in CAUSE_REASONS:
        raise KeyError(f"PROTOCOL.md §4 gives no reason for {cause!r}: state it in CAUSE_REASONS")
    return CAUSE_REASONS[cause]


def disposition(reason: str) -> Disposition:
    """What §4 says an attempt that ended with `reason` was: a retryable failure, a skip,
    or fatal. A reason §4 does not name is fatal: the controller may not invent one.

    >>> disposition("io_error"), disposition("acks_pending"), disposition("wrong_id")
    ('retryable', 'skipped', 'fatal')
    """
    if reason in FAILURE_REASONS:
        return "retryable"
    if reason in SKIP_REASONS:
        return "skipped"
    return "fatal"


def failure_run(run: int, result: str, reason: str) -> int:
    """The run of consecutive failed attempts after one more outcome (§4, §5 I7): a
    completed attempt ends the run; a retryable failure lengthens it; a skip leaves it alone
    (§4: "skips count toward `max_consecutive_skips`, never toward
    `max_consecutive_failures`", and never break a run of failures either). Fold it over
    the log of the attempts' outcomes, each attempt once, when it ended.

    >>> failure_run(2, "completed", "")
    0
    """
    if result == "completed":
        return 0
    if result == "failed" and disposition(reason) == "retryable":
        return run + 1
    return run


def stop_earned(run: int, budget: int, *, fatal: bool = False) -> bool:
    """May the controller be `stopped` (§5 I7): only after a fatal cause, or after more
    than `budget` (`max_consecutive_failures`) retryable failures in a row (`run`, as
    `failure_run` folds them from the outcomes)."""
    return fatal or run > budget


# ============================================================================ M9 selection


@dataclass(frozen=True, slots=True)
class Candidate:
    """A published snapshot as a restore at start may see it: its ordered id, and the
    trainer step, trainer version and topology fingerprint it was taken at."""

    snapshot_id: Any
    trainer_step: int
    trainer_version: str
    fingerprint: str


def newest_match(
    candidates: Iterable[Candidate],
    *,
    step: int,
    version: str,
    fingerprint: str,
    tried: Collection[Any] = (),
) -> Any | None:
    """The snapshot `restore_mode: latest` must select (M9): the newest published one
    whose trainer step, trainer version and topology fingerprint match the trainer anchor
    (`step`, `version`) and the fleet (`fingerprint`), among those this restore has not
    tried and rejected already (`tried`: an S16 fallback goes to an older one). None: no
    match, so a fresh start at the anchor.

    >>> newest_match([Candidate(1, 0, "v0", "f"), Candidate(2, 0, "v0", "f"),
    ...               Candidate(3, 1, "v1", "f")], step=0, version="v0", fingerprint="f")
    2
    """
    matching = [
        c.snapshot_id
        for c in candidates
        if c.trainer_step == step
        and c.trainer_version == version
        and c.fingerprint == fingerprint
        and c.snapshot_id not in tried
    ]
    return max(matching, default=None)


# ============================================================================ §4 conflicts


def conflict_settled(reported: Any, op: str, op_id: Any) -> bool:
    """§4 and S5: a participant answered `checkpoint_conflict` naming the id it is fenced
    to (`reported`). "The controller aborts the reported active id first": until that id
    is retired there, the only control call the controller may send that participant is
    its abort, `resume(reported)`. May it send `op(op_id)`?

    >>> conflict_settled(5, "resume", 5), conflict_settled(5, "prepare", 7)
    (True, False)
    """
    return op == "resume" and op_id == reported


# ============================================================================ M3 receipts


def released_by_ack(receipt: tuple[str, int, str], acked: Collection[tuple[str, int, str]]) -> bool:
    """M3 (and S17): a completed execution's result is released only by an ACK quoting its
    exact receipt `(rollout_id, attempt, receipt)`; `acked` is what the ACK batch that
    reached the agent quoted. A retire, a deadline, a restart or an ACK with another
    receipt never releases it.

    >>> released_by_ack(("r", 0, "abc"), {("r", 0, "abd")})
    False
    """
    return receipt in acked


# ============================================================================ M9 discards


def may_resume_from(continuation: tuple[str, int], kept: Collection[tuple[str, int]]) -> bool:
    """M9 (S12) and M8: a continuation discarded in `restored_paused` (it depends on lost
    `restart_only` state) is never resumed, its rollout restarts from scratch; and a
    continuation is claimed once. So a redispatch may resume `continuation`
    `(rollout_id, attempt)` only while its agent still keeps it restored (`kept`: restored,
    not discarded, not claimed).

    >>> may_resume_from(("r", 0), {("r", 0)}), may_resume_from(("r", 0), set())
    (True, False)
    """
    return continuation in kept
