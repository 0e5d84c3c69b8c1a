"""`quiesce simulate` as a library: determinism across backends, the §8 oracle over many
seeds and fault rates, and the controller crash that restores and redispatches."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quiesce.adapters import Driver, FinishedGroup, RealClock, VirtualClock, configure_logging
from quiesce.harness import SimulationConfig, simulate
from quiesce.harness._simulate import _Run

SMALL = {"steps": 3, "groups_per_step": 2, "group_size": 2}


@pytest.fixture(autouse=True)
def _quiet_logs() -> None:
    configure_logging("critical")


def test_same_seed_same_json_on_asyncio_and_trio() -> None:
    options = {**SMALL, "fault_rate": 0.05, "crash_at_step": 2, "seed": 11}
    first = simulate(backend="asyncio", **options).model_dump_json()
    second = simulate(backend="trio", **options).model_dump_json()
    again = simulate(backend="asyncio", **options).model_dump_json()
    assert first == second == again
    other = simulate(backend="asyncio", **{**options, "seed": 12}).model_dump_json()
    assert other != first  # the seed really drives the run


def test_defaults_finish_with_every_invariant() -> None:
    result = simulate()
    assert result.invariants_ok and not result.stopped
    assert result.steps == SimulationConfig().steps
    c, r = result.checkpoints, result.rollouts
    assert c.completed == result.steps  # a checkpoint at every trainer boundary
    assert r.trained == result.steps * 4 * 4 and r.lost == r.duplicated == 0
    keys = set(json.loads(result.model_dump_json()))
    assert {
        "steps",
        "checkpoints",
        "rollouts",
        "admission_closed_s",
        "invariants_ok",
        "stopped",
        "stop_reason",
    } <= keys


def test_the_crash_path_restores_and_redispatches() -> None:
    result = simulate(**{**SMALL, "steps": 4, "crash_at_step": 2, "seed": 3})
    assert result.crashed_at_step is not None and result.crashed_at_step >= 2
    [restore] = result.restores
    assert restore["kind"] == "snapshot"
    assert result.rollouts.redispatched >= 1
    assert result.rollouts.resumed_from_turn + result.rollouts.rerun_from_scratch >= 1
    assert result.invariants_ok and result.rollouts.lost == 0


def test_group_scored_and_restart_only_runs_keep_the_invariants() -> None:
    scored = simulate(**{**SMALL, "group_scored": True, "crash_at_step": 2, "seed": 5})
    assert scored.invariants_ok
    restart_only = simulate(
        **{**SMALL, "resources_mode": "restart_only", "crash_at_step": 2, "seed": 5}
    )
    assert restart_only.invariants_ok
    # Nothing can resume at a turn when its state lived on a restart_only resource.
    assert restart_only.rollouts.resumed_from_turn == 0


def test_snapshot_dir_keeps_the_published_snapshots(tmp_path: Path) -> None:
    result = simulate(**{**SMALL, "snapshot_dir": tmp_path})
    assert result.invariants_ok
    published = sorted(p.name for p in (tmp_path / "snapshots" / "published").iterdir())
    assert published and all(name.startswith("ck-") for name in published)


def test_the_oracle_sees_a_duplicate_and_a_loss(tmp_path: Path) -> None:
    # The oracle is independent of the coordinator: tamper with the trainer's lineage
    # after a clean run and it must notice.
    config = SimulationConfig(**SMALL, seed=2)
    clock = VirtualClock(seed=2)
    run = _Run(config, clock, tmp_path)
    anyio.run(clock.run, run.main)
    clean = run.result(clock.now())
    assert clean.invariants_ok
    batch = run.trainer.lineage()[0]
    run.trainer.optimizer_step(
        [FinishedGroup(prompt_id=batch.items[0][0], siblings=(batch.items[0][1],))],
        dataloader_position=run.plane.position,
    )
    run.plane.next_prompt()  # consumed, never trained, not in flight
    tampered = run.result(clock.now())
    assert tampered.rollouts.duplicated == 1
    assert tampered.rollouts.lost == config.group_size
    assert not tampered.invariants_ok and len(tampered.violations) == 2


class _Watched(_Run):
    """A run that notes every dataloader or queue action the world takes before it rebuilt
    its view (`_after_restore`) for the controller that is starting."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.viewed: list[Driver | None] = []
        self.early: list[str] = []
        for name in ("next_prompt", "push_finished"):
            setattr(self.plane, name, self._watch(name, getattr(self.plane, name)))

    def _watch(self, name: str, action: Callable[..., Any]) -> Callable[..., Any]:
        def watched(*args: Any) -> Any:
            if not any(viewed is self.driver for viewed in self.viewed):
                self.early.append(name)
            return action(*args)

        return watched

    def _after_restore(self, *args: Any) -> None:
        super()._after_restore(*args)
        self.viewed.append(self.driver)


@pytest.mark.parametrize("crash_at_step", [None, 2])
def test_the_world_never_reacts_before_it_rebuilt_its_view(
    tmp_path: Path, crash_at_step: int | None
) -> None:
    # `Driver.start()` steps the restore and then the completions agents still hold: a
    # reaction to those steps would open groups and push finished ones by the view of a
    # previous controller (a fresh process pushes what the restored queue holds: twice).
    config = SimulationConfig(**{**SMALL, "steps": 4}, crash_at_step=crash_at_step, seed=3)
    clock = VirtualClock(seed=3)
    run = _Watched(config, clock, tmp_path)
    anyio.run(clock.run, run.main)
    assert run.early == []
    assert len(run.viewed) == (1 if crash_at_step is None else 2)
    assert run.result(clock.now()).invariants_ok


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_world_runs_on_the_real_clock(tmp_path: Path, backend: str) -> None:
    # The world depends on the `Clock` protocol only: its time limit is relative to its
    # start (trio's clock starts anywhere), and a clean stop keeps the store jobs the
    # last checkpoint queued (its intent record is cleared: I3).
    config = SimulationConfig(**SMALL, seed=1)
    clock = RealClock(seed=1)

    async def main() -> Any:
        run = _Run(config, clock, tmp_path)
        start = clock.now()
        await run.main()
        return run.result(clock.now() - start)

    result = anyio.run(main, backend=backend)
    assert result.violations == []
    assert (result.rollouts.lost, result.rollouts.duplicated) == (0, 0)
    assert result.checkpoints.completed == result.steps == SMALL["steps"]


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(min_value=0, max_value=2**16),
    fault_rate=st.sampled_from([0.0, 0.01, 0.05, 0.2, 0.5, 0.9]),
    crash=st.one_of(st.none(), st.integers(min_value=1, max_value=3)),
)
def test_nothing_is_lost_or_duplicated_for_any_seed_and_fault_rate(
    seed: int, fault_rate: float, crash: int | None
) -> None:
    result = simulate(**{**SMALL, "seed": seed, "fault_rate": fault_rate, "crash_at_step": crash})
    assert result.rollouts.lost == 0
    assert result.rollouts.duplicated == 0
    assert result.invariants_ok, result.violations
    if result.stopped:
        assert result.stop_reason in ("max_consecutive_failures", "invariant_error")
