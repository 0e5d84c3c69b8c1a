"""The spec's rules, stated once from PROTOCOL.md and never read from the code's tables,
counters or policy objects: §3's phase order written out, §4's failure reasons and the
consecutive-failure count folded from the outcomes, M9's newest match, the conflict that
must be followed by its abort, the continuations a resume may use, and the ACK that
releases a result only with its exact receipt. Both models' judges state their
invariants with these, so a bug in a table the code walks cannot change its own judge.
"""

from __future__ import annotations

from quiesce.models.oracles._rules import (
    CAUSE_REASONS,
    FAILURE_REASONS,
    FATAL_REASON,
    SKIP_REASONS,
    SPEC_PHASE_ORDER,
    Candidate,
    conflict_settled,
    disposition,
    failure_run,
    may_resume_from,
    newest_match,
    reason_of,
    released_by_ack,
    stop_earned,
)

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
