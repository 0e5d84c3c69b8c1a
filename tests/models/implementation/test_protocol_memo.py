"""The protocol model's speed machinery: strict interning, per-instance memos, the copier,
and the benchmark that reports the model's speed."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from quiesce.check import check, replace
from quiesce.models import ProtocolModel, ProtocolParams
from quiesce.models.implementation._memo import Interner, same
from quiesce.models.implementation._state import Env
from quiesce.models.scenarios import small_params
from quiesce.mutants import MUTANTS
from quiesce.protocol import OpId

ROOT = Path(__file__).resolve().parents[3]
SMALL = ProtocolParams(**small_params())


def test_same_sees_what_equality_ignores() -> None:
    restore, checkpoint = OpId(2, 1, 0, "rs"), OpId(2, 1, 0, "ck")
    assert restore == checkpoint  # OpId compares by (epoch, seq) only
    assert not same(restore, checkpoint)
    assert not same((1, restore), (1, checkpoint))
    assert same((1, OpId(2, 1, 0, "rs")), (1, restore))
    assert not same(1, True) and not same(0.0, 0)


def test_interner_keeps_strictly_different_values_apart() -> None:
    intern = Interner()
    restore = intern((OpId(2, 1, 0, "rs"),))
    assert intern((OpId(2, 1, 0, "rs"),)) is restore
    checkpoint = intern((OpId(2, 1, 0, "ck"),))
    assert checkpoint is not restore and checkpoint[0].kind == "ck"
    assert intern.hash_of(checkpoint) == hash(checkpoint) == hash(restore)
    assert len(intern) == 2


def test_copier_is_dataclasses_replace() -> None:
    env = Env(triggers=2, faults=1)
    assert replace(env, faults=0, epoch=3) == dataclasses.replace(env, faults=0, epoch=3)
    assert replace(env) == env and replace(env) is not env
    with pytest.raises(TypeError, match="no fields"):
        replace(env, nonsense=1)


def test_memos_belong_to_one_model() -> None:
    # A mutant's model must never be answered from the protocol's memo (nor the reverse).
    mutant = MUTANTS["S2_boolean_suspend"]
    params = ProtocolParams(**mutant.params)
    plain = ProtocolModel(params)
    assert check(plain).ok
    mutated = ProtocolModel(params, hooks=mutant.hooks())
    assert mutated.system.coordinator is not plain.system.coordinator
    assert not check(mutated).ok
    assert check(ProtocolModel(params)).ok


def test_a_second_run_of_one_model_finds_the_same_states() -> None:
    # The second run is answered from the memos: the same graph, state for state.
    model = ProtocolModel(SMALL)
    first, second = check(model), check(model)
    assert first.distinct_states == second.distinct_states == 1655
    assert first.generated_states == second.generated_states


def test_bench_reports_the_protocol_model_speed() -> None:
    spec = importlib.util.spec_from_file_location(
        "bench_explorer", ROOT / "benchmarks" / "bench_explorer.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_explorer", module)
    spec.loader.exec_module(module)
    figures = module.measure_protocol(500)
    assert figures["protocol_distinct_states"] == 500
    assert figures["protocol_generated_states"] >= 500
    assert figures["protocol_states_per_s"] > 0 and figures["protocol_us_per_successor"] > 0
    assert not figures["protocol_exact"] and 0 < figures["protocol_bytes_per_state"] <= 100


def test_hash_of_a_value_the_interner_never_saw_interns_it_first() -> None:
    # A mutant's model builds a state (on its exception path) from parts another model's
    # interner made: hashing them must not need them to be this interner's already.
    intern = Interner()
    canonical = intern(("a", 1))
    twin = ("a", 1)
    assert intern.hash_of(("b", 2)) == hash(("b", 2))
    assert intern.hash_of(twin) == hash(canonical)
    assert intern(twin) is canonical
