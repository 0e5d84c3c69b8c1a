"""Where the spec leaves a server a choice: the refusals of one `begin` that apply."""

from __future__ import annotations

from typing import Any

from quiesce.protocol.participant import ParticipantState, handle, new_participant
from quiesce.testing._latitude import begin_refusals
from quiesce.testing._projection import other_refusal


def _agent() -> ParticipantState:
    return new_participant({"name": "agent-l", "role": "agent"}, "inc-1")


def _step(state: ParticipantState, op: str, **body: Any) -> ParticipantState:
    after, reply, _ = handle(state, op, body)
    assert not hasattr(reply, "code"), reply
    return after


def _begin(rollout: str, attempt: int = 0, resume: int = 0) -> dict[str, Any]:
    return {
        "rollout_id": rollout,
        "attempt": attempt,
        "group_id": "g",
        "turns": 2,
        "resume_from_turn": resume,
    }


def test_a_new_key_on_an_idle_fence_has_no_refusal() -> None:
    assert begin_refusals(_agent(), _begin("r")) == frozenset()


def test_every_refusal_that_applies_is_listed_and_the_reference_answers_one_of_them() -> None:
    state = _step(_agent(), "begin", **_begin("live"))
    state = _step(state, "begin", **_begin("gone"))
    state = _step(state, "retire", rollout_id="gone", attempt=0)
    state = _step(state, "prepare", op_id="ck-1-1-step1", deadline_at=9.0)  # fence closed
    cases = {
        "live": ({"admission_closed", "duplicate_execution"}, _begin("live")),
        "gone": ({"admission_closed", "stale_attempt"}, _begin("gone")),
        "claim": ({"admission_closed", "unknown_execution"}, _begin("new", 1, resume=1)),
    }
    for name, (codes, body) in cases.items():
        applicable = begin_refusals(state, body)
        assert applicable == codes, name
        _, reply, _ = handle(state, "begin", body)
        assert reply.code in applicable, name  # the reference picks one of them


def test_a_body_that_is_not_a_begin_or_a_role_that_is_not_an_agent_has_none() -> None:
    policy = new_participant({"name": "policy-l", "role": "policy"}, "inc-1")
    assert begin_refusals(policy, _begin("r")) == frozenset()
    assert begin_refusals(_agent(), {"rollout_id": 3}) == frozenset()
    assert begin_refusals(_agent(), None) == frozenset()


def test_the_kit_accepts_another_applicable_refusal_and_nothing_else() -> None:
    expected = {"http": 409, "code": "admission_closed", "active_id": None}
    codes = frozenset({"admission_closed", "stale_attempt"})
    assert other_refusal(expected, {**expected, "code": "stale_attempt"}, codes)
    assert not other_refusal(expected, expected, codes)  # the same answer: nothing to excuse
    assert not other_refusal(expected, {**expected, "code": "duplicate_execution"}, codes)
    assert not other_refusal(expected, {**expected, "code": "stale_attempt", "http": 200}, codes)
    ok = {"http": 200, "state": "running"}
    assert not other_refusal(ok, {"http": 409, "code": "stale_attempt"}, codes)
