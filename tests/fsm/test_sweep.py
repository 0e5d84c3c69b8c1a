"""A sweep over every `(state, input)` pair of every registered table (h2-style).

Two layers:
- statically, every pair of every table: a forbidden pair raises exactly
  `TransitionNotAllowed` (not `GuardRejected`) carrying machine, state and input, and an
  ignored pair returns the value unchanged with no effects; data plays no part in either;
- dynamically, hypothesis walks each table from its initial value with random inputs and
  arguments; at every reachable value it fires *every* input and checks the step against
  the table: success exactly when the table maps or ignores the pair and (for a mapped
  pair) some guard holds, the target of the first row whose guard holds, refusal as
  `TransitionNotAllowed` exactly when the table says forbidden, `GuardRejected` exactly
  when no guard holds, never any other exception; and the table's invariants hold in
  every value a step produces.

The argument hook: `ARG_STRATEGIES[table name][input name]` is the hypothesis strategy for
that input's argument; inputs not listed get `None`. A table whose guards or updates need
an argument must add its entry here (a guard raising on `None` fails the sweep, pointing
at this dict).
"""

from __future__ import annotations

import itertools
from enum import Enum
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from quiesce.fsm import GuardRejected, Table, TransitionNotAllowed, Value, label, registered
from quiesce.protocol import ADMISSION_GATE, GateInput, IntentAction, IntentDecision
from quiesce.protocol._agent_execution import Admission, Completion
from quiesce.protocol._control_fence import FenceCall, FenceInput, FenceOp
from quiesce.protocol._ids import OpId
from quiesce.protocol._resources import Mutation

OWNERS = st.sampled_from(["checkpoint", "train_switch", "weight_sync"])
RECEIPTS = st.sampled_from(["receipt-1", "receipt-2"])
CALL_IDS = st.sampled_from(["call-1", "call-2"])
ROLLOUTS = st.sampled_from(["r0", "r1"])
OP_IDS = st.builds(OpId, st.just(1), st.integers(min_value=1, max_value=3), st.just(0))
FENCE_OPS = {
    FenceInput.RECV_PREPARE: FenceOp.PREPARE,
    FenceInput.PREPARE_READY: FenceOp.PREPARE,
    FenceInput.PREPARE_NOT_READY: FenceOp.PREPARE,
    FenceInput.RECV_COMMIT: FenceOp.COMMIT,
    FenceInput.COMMIT_DONE: FenceOp.COMMIT,
    FenceInput.COMMIT_FAILED: FenceOp.COMMIT,
    FenceInput.RECV_RESUME: FenceOp.RESUME,
    FenceInput.RECV_RESTORE: FenceOp.RESTORE,
    FenceInput.RESTORE_DONE: FenceOp.RESTORE,
    FenceInput.RESTORE_FAILED: FenceOp.RESTORE,
    FenceInput.RECV_DISCARD: FenceOp.DISCARD,
    FenceInput.RECV_STATUS: FenceOp.STATUS,
}

ARG_STRATEGIES: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "admission_gate": {"hold": OWNERS, "release": OWNERS},
    "rollout_attempt": {"rollout_completed": RECEIPTS, "ack_flushed": RECEIPTS},
    # Sibling indexes, including ones outside any group (-1) to exercise the guards.
    "prompt_group": {"sibling_sealed": st.integers(min_value=-1, max_value=4)},
    # Participant tables (M2-M5): ordered ids around the watermark, each input's own op.
    "control_fence": {
        label(i): st.builds(FenceCall, st.just(op), OP_IDS, st.sampled_from([None, "result"]))
        for i, op in FENCE_OPS.items()
    },
    "agent_execution": {
        "begin": st.builds(Admission, st.booleans(), st.booleans()),
        "turn_boundary": st.integers(min_value=0, max_value=3),
        "policy_resumed": st.booleans(),
        "run_finished": st.builds(Completion, RECEIPTS, st.just("{}")),
        "recv_ack": RECEIPTS,
    },
    "policy_admission": {"call_started": CALL_IDS, "call_finished": CALL_IDS},
    "resources": {
        "mutation_started": st.builds(Mutation, CALL_IDS, ROLLOUTS),
        "mutation_finished": st.builds(Mutation, CALL_IDS, ROLLOUTS),
        "import": st.lists(st.tuples(ROLLOUTS, st.integers(0, 3)), max_size=2).map(tuple),
    },
    "restore": {
        "intent_read": st.builds(
            IntentDecision, st.sampled_from(IntentAction), st.none(), st.just("sweep")
        ),
        "snapshot_selected": st.sampled_from(["snapshot-1", "snapshot-2"]),
        "restore_rejected": st.sampled_from(["digest_mismatch", "unowned_execution"]),
        "discard_begin": st.integers(min_value=0, max_value=3),
    },
}
"""Per table name, per input name (`quiesce.fsm.label`): the strategy of its argument."""

TABLES = registered()


def arg_strategy(table: Table[Any, Any], input: Enum) -> st.SearchStrategy[Any]:
    return ARG_STRATEGIES.get(table.name, {}).get(label(input), st.none())


def first_firing_row_target(
    table: Table[Any, Any], value: Value[Any, Any], input: Enum, arg: Any
) -> Enum | None:
    """The table's own answer, read from its rows: target of the first row whose guard holds."""
    for row in table.rows_for(value.state, input):
        if row.guard is None or table.guards[row.guard](value, arg):
            return row.target or value.state
    return None


def check_step(table: Table[Any, Any], value: Value[Any, Any], input: Enum, arg: Any) -> None:
    """Fire `input` on `value` and check the outcome against what the table declares."""
    disposition = table.disposition(value.state, input)
    where = f"{table.name}: {label(input)}({arg!r}) in {value}"
    try:
        next_value, effects = table.step(value, input, arg)
    except GuardRejected as error:
        assert disposition == "mapped", where
        assert first_firing_row_target(table, value, input, arg) is None, where
        assert (error.state, error.input) == (value.state, input), where
        return
    except TransitionNotAllowed as error:
        assert disposition == "forbidden", where
        assert type(error) is TransitionNotAllowed, where
        assert (error.machine, error.state, error.input) == (table.name, value.state, input)
        return
    except Exception as error:
        error.add_note(
            f"{where} raised {type(error).__name__}; if the argument has the wrong type, "
            "add a strategy for it to ARG_STRATEGIES in tests/fsm/test_sweep.py"
        )
        raise
    assert disposition != "forbidden", where
    if disposition == "ignored":
        assert next_value is value and effects == (), where
    else:
        assert next_value.state is first_firing_row_target(table, value, input, arg), where
    assert table.check_invariants(next_value) == [], f"{where} -> {next_value}"


@pytest.mark.parametrize("name", list(TABLES))
def test_every_pair_without_rows_is_decided_without_the_data(name: str) -> None:
    table = TABLES[name]
    seen = {"mapped": 0, "ignored": 0, "forbidden": 0}
    for state, input in itertools.product(table.states, table.inputs):
        disposition = table.disposition(state, input)
        seen[disposition] += 1
        value = Value(state, table.initial_data)
        where = f"{name}: {label(input)} in {label(state)}"
        if disposition == "forbidden":
            with pytest.raises(TransitionNotAllowed) as caught:
                table.step(value, input)
            error = caught.value
            assert type(error) is TransitionNotAllowed, where
            assert (error.machine, error.state, error.input) == (name, state, input), where
            assert not table.enabled(value, input), where
        elif disposition == "ignored":
            assert table.step(value, input) == (value, ()), where
            assert table.enabled(value, input), where
        else:
            assert table.rows_for(state, input), where
    assert sum(seen.values()) == len(table.states) * len(table.inputs)
    assert seen["mapped"] >= len(table.inputs), "every input is handled by some row"


@pytest.mark.parametrize("name", list(TABLES))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_walks_sweep_every_input_from_every_reached_value(
    name: str, data: st.DataObject
) -> None:
    table = TABLES[name]
    inputs = list(table.inputs)
    value = table.start()
    assert table.check_invariants(value) == []
    for _ in range(data.draw(st.integers(min_value=0, max_value=25), label="walk length")):
        event(f"reached {label(value.state)}")
        for input in inputs:
            check_step(table, value, input, data.draw(arg_strategy(table, input)))
        input = data.draw(st.sampled_from(inputs), label="next input")
        arg = data.draw(arg_strategy(table, input), label="its argument")
        if table.enabled(value, input, arg):
            value, _ = table.step(value, input, arg)


def test_every_registered_table_is_swept() -> None:
    # A table registered after collection would escape the sweep.
    assert list(registered()) == list(TABLES)
    assert TABLES, "no table is registered"


def test_the_sweep_catches_a_table_that_breaks_its_invariant() -> None:
    broken = ADMISSION_GATE.without_guard(3)  # any release reopens the gate
    value = ADMISSION_GATE.start()
    for owner in ("checkpoint", "weight_sync"):
        value, _ = broken.step(value, GateInput.HOLD, owner)
    with pytest.raises(AssertionError, match="release"):
        check_step(broken, value, GateInput.RELEASE, "checkpoint")
    check_step(ADMISSION_GATE, value, GateInput.RELEASE, "checkpoint")
