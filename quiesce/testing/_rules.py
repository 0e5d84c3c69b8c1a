"""Which rule of PROTOCOL.md or docs/wire.md a reply that differs from the oracle's
breaks, in words, and how two replies differ, field by field.

What lives here: the rules a `ConformanceViolation` carries (`Rule`: a short `id` a
deviation names, and its text), the `differences` and a step's `note`. What it does not
know: how a reply is judged (`_machine` decides that a difference is a violation; this
module only names it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quiesce.testing._results import brief

__all__ = [
    "CODE_RULES",
    "DUPLICATE_RULE",
    "DURABILITY_RULE",
    "INCARNATION_RULE",
    "RACE_RULE",
    "REPLAY_RULE",
    "RESTART_RULE",
    "RULE_IDS",
    "SECTIONS",
    "SETUP_RULE_ID",
    "UNREACHABLE_RULE",
    "Rule",
    "describe_differences",
    "describe_disagreement",
    "hint",
    "section_of",
    "step_note",
]


@dataclass(frozen=True, slots=True)
class Rule:
    """A rule the kit judges by: `id`, the short name a report groups failures by and a
    declared deviation names (`RULE_IDS`), and `text`, the rule in words with its fix."""

    id: str
    text: str


SECTIONS = {
    "M2": "docs/protocol.md#m2-control-fence-control_fence-one-per-participant",
    "M3": "docs/protocol.md#m3-agent-execution-agent_execution-one-per-rollout-attempt",
    "M4": "docs/protocol.md#m4-policy-admission-policy_admission",
    "M5": "docs/protocol.md#m5-resources-resources",
    "§6": "docs/protocol.md#6-crashes-and-durability",
    "docs/wire.md": "docs/wire.md",
}
"""Where each rule the kit names is written down (a docs/protocol.md section, or the wire
page), by the tag a rule's text starts with."""


def section_of(rule: str) -> str:
    """The page and section of the rule text `rule` (the first tag of `SECTIONS` it
    names), or ""."""
    named = [(rule.find(tag), page) for tag, page in SECTIONS.items() if tag in rule]
    return min(named)[1] if named else ""


_CODE_TEXTS = {
    "stale_checkpoint": "M2 (S15): an id at or below the high-watermark (the newest retired "
    "id) is refused stale_checkpoint, carrying the watermark",
    "checkpoint_conflict": "M2 (S5): another id while one is active is refused "
    "checkpoint_conflict, carrying the active id",
    "invalid_phase": "M2/M3: an operation not legal in the current state is refused "
    "invalid_phase and changes nothing",
    "admission_closed": "M3: begin while the fence is not idle is refused admission_closed",
    "stale_attempt": "M3: begin of an acked or tombstoned attempt is refused stale_attempt",
    "duplicate_execution": "M3: begin of a live attempt is refused duplicate_execution",
    "unknown_execution": "M3: an event for an execution (or restored continuation) this agent "
    "does not hold is refused unknown_execution",
    "unsupported_operation": "docs/wire.md: an agent operation on another role (or a fence "
    "operation on an auxiliary policy) is refused unsupported_operation",
    "malformed_request": "docs/wire.md: a malformed body is 422 malformed_request naming the "
    "bad field, and changes nothing",
    "unauthorized": "docs/wire.md: a missing or wrong bearer token is 401 unauthorized, and "
    "changes nothing",
}
CODE_RULES = {code: Rule(code, text) for code, text in _CODE_TEXTS.items()}
"""The rule of each refusal code, by code (its id is the code)."""

DUPLICATE_RULE = Rule(
    "duplicate",
    "M2 (concurrent duplicate): the same (op, op_id) sent twice at once is one operation: the "
    "duplicate waits for the first and gets its reply (if the first failed, it runs on its "
    "own), so each copy gets the single request's reply (no 409 or 5xx of its own) and the "
    "state after is a single request's; "
    "fix: key in-flight control requests by (op, op_id) and let a duplicate await the "
    "first's reply, instead of refusing it or running the operation again",
)

INCARNATION_RULE = Rule(
    "incarnation",
    "§6: a restarted participant answers under a new incarnation (docs/wire.md: every reply "
    "carries the incarnation of the running process)",
)

RESTART_RULE = Rule(
    "restart",
    "§6: a restarted participant serves again: once the restart hook returns, the server "
    "answers discovery (capabilities, same role) on the same URL; fix: make the restart "
    "command wait until the new server answers /healthz, and read the server's log for why "
    "it did not come back",
)

DURABILITY_RULE = Rule(
    "durability",
    "§6: what was replied before a crash is what the journal gives after it: every state "
    "change a reply reports is journaled (written and fsynced) before the reply is sent; "
    "fix: await the journal write before answering",
)

RACE_RULE = Rule(
    "linearizability",
    "M2 (linearizability): operations in flight at once take effect one at a time, in some "
    "order: no order of the overlapping requests, run through the reference participant, "
    "gives these replies and this state (an outcome arriving after the fence moved on, such "
    "as a prepare overtaken by a resume, must be dropped, not applied to the newer state); "
    "fix: decide and apply each operation under one lock, and drop a long-polled result whose "
    "op id is no longer the active one",
)

_OP_RULES = {
    "prepare": "M2/M3-M5: prepare(X) runs from idle (or preparing with the same X); it is ready "
    "iff the role is quiescent (agent: nothing running or park_requested, nothing completed "
    "un-ACKed)",
    "commit": "M2: commit(X) runs from prepared with the same X",
    "resume": "M2: resume(X) is legal from any non-idle state whose active id is X, and from "
    "idle with any X above the high-watermark (it retires X)",
    "restore": "M2: restore(R) runs from idle (or restore_failed_paused with the same R); an "
    "artifact whose digest differs from expected_digest fails (restore_failed_paused)",
    "discard": "M2: discard(R, rollout) holds restored_paused with the same R",
    "begin": "M3: begin starts an execution (running) when the fence is idle and the key is new",
    "boundary": "M3: a turn boundary parks a park_requested execution; a running one goes on",
    "finish": "M3: a finished /run completes a running or park_requested execution and holds "
    "its result until an exact-receipt ACK",
    "ack": "M3: an exact-receipt ACK releases a completed result (idempotent); an unknown "
    "receipt is listed in `unknown` and releases nothing",
    "retire": "M3: retire tombstones a live execution (new, running, park_requested, parked, "
    "frozen) and answers an ended one already_retired",
    "status": "the state read through status differs from the reference participant's",
    "completions": "M3: completions lists exactly the completed-but-unACKed results",
}


def describe_differences(expected: dict[str, Any], actual: dict[str, Any]) -> tuple[str, ...]:
    """`field: expected X, got Y` for every field where the server's reply differs."""
    keys = sorted(set(expected) | set(actual))
    return tuple(
        f"{k}: expected {expected.get(k)!r}, got {actual.get(k)!r}"
        for k in keys
        if expected.get(k) != actual.get(k)
    )


_HELD_ON_RETIRE = Rule(
    "retire_completed",
    "M3 (S17): retire of a completed, un-ACKed execution holds it and answers "
    "completed_unacknowledged: only an ACK releases a result",
)
REPLY_MODEL_RULE = Rule(
    "reply_model", "docs/wire.md: every reply body is the typed model of its route and status"
)
NO_5XX_RULE = Rule(
    "no_5xx", "docs/wire.md: no input is answered 5xx (a 5xx means the server itself failed)"
)
RESTARTED_RULE = Rule(
    "incarnation",
    "every reply carries the incarnation of the running process: it changed, so the server "
    "restarted during the run",
)
REPLAY_RULE = Rule(
    "replay", "M2: the same (op_id, op) after a success is answered from the record, unchanged"
)
UNREACHABLE_RULE = Rule("unreachable", "the server stopped answering")
SETUP_RULE_ID = "setup"
"""The id of every rule about bringing a shared server back to a known state."""

_AFTER_RULES = {
    "failed_commit": Rule(
        "failed_commit", "M2: a commit answered failed returns the fence to prepared"
    ),
    "failed_restore": Rule(
        "failed_restore", "M2: a restore answered failed leaves the fence restore_failed_paused"
    ),
}


def _op_rule(op: str, expected: dict[str, Any]) -> Rule:
    """The rule of `op`'s own reply or effect; retire's depends on what it retired."""
    if op == "retire" and expected.get("outcome") == "completed_unacknowledged":
        return _HELD_ON_RETIRE
    return Rule(op, _OP_RULES.get(op, f"the reply to {op} differs from the reference's"))


RULE_IDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        (
            *_OP_RULES,
            *CODE_RULES,
            _HELD_ON_RETIRE.id,
            *(rule.id for rule in _AFTER_RULES.values()),
            "refused_changes_nothing",
            REPLAY_RULE.id,
            DUPLICATE_RULE.id,
            RACE_RULE.id,
            DURABILITY_RULE.id,
            INCARNATION_RULE.id,
            RESTART_RULE.id,
            REPLY_MODEL_RULE.id,
            NO_5XX_RULE.id,
            UNREACHABLE_RULE.id,
            SETUP_RULE_ID,
        )
    )
)
"""Every rule id the kit reports a failure under: what `--deviation RULE[:SHAPE]` names."""


def hint(
    op: str,
    expected: dict[str, Any],
    actual: dict[str, Any],
    after: str,
    before: dict[str, Any] | None = None,
) -> Rule:
    """Which rule a difference breaks (`after`: what the previous request did; `before`:
    the projection the oracle expected for that request, which picks its rule)."""
    if "unparseable" in actual:
        return REPLY_MODEL_RULE
    if isinstance(actual.get("http"), int) and actual["http"] >= 500:
        return NO_5XX_RULE
    both = "incarnation" in actual and "incarnation" in expected
    if both and expected["incarnation"] != actual["incarnation"] and after != "restart":
        return RESTARTED_RULE
    if op in ("status", "completions"):
        if after == "restart":
            return DURABILITY_RULE
        if after.startswith("duplicate:"):
            return DUPLICATE_RULE
        if after in _AFTER_RULES:
            return _AFTER_RULES[after]
        if after.startswith("refused:"):
            refused = after.removeprefix("refused:")
            return Rule("refused_changes_nothing", f"a refused {refused} must change nothing")
        if after in _OP_RULES and after != op:
            rule = _op_rule(after, before or {})
            return Rule(rule.id, f"after {after}, {_OP_RULES[op]}; {rule.text}")
        return _op_rule(op, expected)
    code = expected.get("code")
    if isinstance(code, str) and code in CODE_RULES:
        return CODE_RULES[code]
    return _op_rule(op, expected)


def describe_disagreement(one: Any, other: Any) -> tuple[str, ...]:
    """How two replies to the same request differ, field by field."""
    if not (isinstance(one, dict) and isinstance(other, dict)):
        return (f"one copy got {brief(one)}, the other {brief(other)}",)
    keys = sorted(set(one) | set(other))
    return tuple(
        f"{k}: one copy got {one.get(k)!r}, the other {other.get(k)!r}"
        for k in keys
        if one.get(k) != other.get(k)
    )


def step_note(op: str, failed: bool, number: int, copies: int) -> str:
    """Why a step's reply may differ from the oracle's, and which copy it is."""
    allowed = f"the server failed the {op}: allowed; it must now be where M2 says"
    if copies == 1:
        return allowed if failed else ""
    copy = f"copy {number} of {copies}, sent at once: all in flight before any reply was read"
    return f"{copy}; {allowed}" if failed else copy
