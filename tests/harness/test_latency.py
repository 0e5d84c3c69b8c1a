"""`simulate`'s latency profiles and its checkpointing switch: `fast` is today's run exactly,
`review` stretches the same run to turns of seconds and training steps of minutes, and
`checkpointing=False` is the same training with no checkpoint at all."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from quiesce.adapters import SnapshotStore
from quiesce.harness import (
    LATENCY_PROFILES,
    LatencyProfile,
    SimulationConfig,
    UnknownLatencyProfile,
    simulate,
)
from quiesce.protocol.controller import ControllerEffect, ControllerInput, ControllerState
from quiesce.protocol.controller.lowlevel import Metric

SMALL = {"steps": 3, "groups_per_step": 2, "group_size": 2}


def test_the_fast_profile_is_the_default_run_exactly() -> None:
    options = {**SMALL, "fault_rate": 0.1, "crash_at_step": 2, "seed": 11}
    default = simulate(**options).model_dump_json()
    assert simulate(**options, latency="fast").model_dump_json() == default
    # A profile equal to `fast` but built anew is the same run too: it is the figures,
    # not the name, that drive it.
    copy = replace(LATENCY_PROFILES["fast"], name="copy")
    assert simulate(**options, latency=copy).model_dump_json() == default


def test_the_review_profile_stretches_the_run_to_its_stated_latencies() -> None:
    review = LATENCY_PROFILES["review"]
    closed: list[float] = []

    def observe(
        _event: ControllerInput, effects: tuple[ControllerEffect, ...], _state: ControllerState
    ) -> None:
        closed.extend(
            e.value
            for e in effects
            if isinstance(e, Metric) and e.name == "checkpoint.admission_closed_s"
        )

    result = simulate(**SMALL, seed=1, latency="review", observers=[observe])
    fast = simulate(**SMALL, seed=1)
    assert result.verdict == "ok", result.violations
    assert result.rollouts.trained == fast.rollouts.trained == 3 * 2 * 2
    # Every optimizer step takes its two minutes, and the trainer's own checkpoint write
    # at its end; the fast run is over in seconds.
    assert review.train_step(2, saves=True) == 150.0
    assert result.virtual_seconds >= SMALL["steps"] * review.train_step(2, saves=True)
    assert fast.virtual_seconds < 60
    # A snapshot waits for the snapshot writes of seconds (agents, then resources: §3).
    assert result.checkpoints.completed == SMALL["steps"]
    assert closed and min(closed) >= 2 * review.snapshot_write_s[0]


@pytest.mark.parametrize("checkpointing", [True, False])
def test_the_trainer_save_lengthens_every_step_in_both_modes(checkpointing: bool) -> None:
    # The trainer writes its own checkpoint at the end of every step (save_period 1), with
    # participant checkpointing on or off, and nothing else moves: the run is exactly that
    # much longer (the bench's `on / off without trainer save` subtracts it on this basis).
    review = LATENCY_PROFILES["review"]
    options = {**SMALL, "seed": 3, "latency": review, "checkpointing": checkpointing}
    saving = simulate(**options)
    bare = simulate(**{**options, "latency": replace(review, trainer_save_s=0.0)})
    assert saving.verdict == bare.verdict == "ok"
    assert saving.steps == SMALL["steps"]
    assert saving.virtual_seconds == pytest.approx(
        bare.virtual_seconds + SMALL["steps"] * review.trainer_save_s, abs=1e-6
    )
    assert saving.model_dump(exclude={"virtual_seconds"}) == bare.model_dump(
        exclude={"virtual_seconds"}
    )


def test_checkpointing_off_trains_everything_and_never_checkpoints(tmp_path: Path) -> None:
    on = simulate(**SMALL, seed=2)
    off = simulate(**SMALL, seed=2, checkpointing=False, snapshot_dir=tmp_path)
    assert off.verdict == "ok", off.violations
    counts = off.checkpoints
    assert (counts.completed, counts.skipped, counts.failed, counts.aborted) == (0, 0, 0, 0)
    assert off.admission_closed_s.max == 0.0
    assert SnapshotStore(tmp_path / "snapshots").published() == ()
    assert off.rollouts.trained == on.rollouts.trained == 3 * 2 * 2
    # The same training, without the snapshots' pauses: it ends sooner.
    assert on.checkpoints.completed == SMALL["steps"]
    assert off.virtual_seconds < on.virtual_seconds


def test_a_crash_needs_checkpointing() -> None:
    with pytest.raises(ValidationError, match="crash_at_step needs checkpointing"):
        SimulationConfig(crash_at_step=2, checkpointing=False)


def test_an_unknown_profile_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValidationError, match="no latency profile 'slow'; choose one of fast"):
        SimulationConfig(latency="slow")
    with pytest.raises(UnknownLatencyProfile, match="choose one of fast, review"):
        LatencyProfile.named("slow")


def test_a_profile_refuses_an_upside_down_range() -> None:
    with pytest.raises(ValueError, match="snapshot_write_s must be a range"):
        replace(LATENCY_PROFILES["review"], snapshot_write_s=(5.0, 1.0))
    with pytest.raises(ValueError, match="training step times must be >= 0"):
        replace(LATENCY_PROFILES["review"], train_step_s=-1.0)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="trainer_save_s must be >= 0"):
            replace(LATENCY_PROFILES["review"], trainer_save_s=bad)


def test_a_turn_is_a_policy_call_and_a_tool_call() -> None:
    review = LATENCY_PROFILES["review"]
    assert review.turn_s == (1.2, 5.0)
    assert "turn 1.2-5 s" in review.describe() and "every 120 s" in review.describe()
    assert "trainer checkpoint write 30 s per saving step" in review.describe()
    assert "trainer checkpoint write none" in LATENCY_PROFILES["fast"].describe()


def test_only_the_review_profile_saves_the_trainer_checkpoint() -> None:
    fast, review = LATENCY_PROFILES["fast"], LATENCY_PROFILES["review"]
    assert fast.trainer_save_s == 0.0 and fast.train_step(4, saves=True) == fast.train_step(4)
    assert review.trainer_save_s == 30.0
    assert review.train_step(4, saves=True) == review.train_step(4) + 30.0


def test_the_time_limit_grows_with_a_long_run_of_slow_steps() -> None:
    assert SimulationConfig().time_limit == 20_000.0
    assert SimulationConfig(steps=10_000).time_limit > 20_000.0
    long_review = SimulationConfig(steps=200, latency="review")
    # 200 steps of two minutes and a trainer save each, and a periodic interval each, four
    # times over.
    assert long_review.time_limit == 4 * 200 * (120.0 + 30.0 + 120.0)
    assert SimulationConfig(steps=200, latency="review", time_limit_s=5.0).time_limit == 5.0
