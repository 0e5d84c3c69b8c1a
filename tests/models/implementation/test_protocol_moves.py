"""The protocol model's memo of system moves: the same graph with it, without it, and
after it starts over."""

from __future__ import annotations

import pytest

from quiesce.check import check
from quiesce.models import ProtocolModel, ProtocolParams
from quiesce.models.implementation import _model as _protocol_model
from quiesce.models.scenarios import small_params

SMALL = ProtocolParams(**small_params())


def _graph(model: ProtocolModel) -> tuple[int, int]:
    result = check(model)
    assert result.ok and result.complete
    return result.distinct_states, result.generated_states


def test_moves_are_remembered_per_canonical_system() -> None:
    model = ProtocolModel(SMALL)
    assert _graph(model)[0] == 1655
    # Fewer systems than moves: a system's several actions share one canonical object.
    assert 0 < len(model._systems) < len(model._moves)
    assert _graph(ProtocolModel(SMALL, memoise=False)) == _graph(ProtocolModel(SMALL))


def test_a_memo_that_starts_over_finds_the_same_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _graph(ProtocolModel(SMALL))
    monkeypatch.setattr(_protocol_model, "_MOVES_KEPT", 64)
    model = ProtocolModel(SMALL)
    assert _graph(model) == expected
    assert len(model._moves) <= 64
