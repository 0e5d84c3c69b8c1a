"""`build_controller`: a controller that cannot be wired wrong, and a failed prepare that
names who was not ready."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

from quiesce.adapters import (
    ControllerJournal,
    Driver,
    InMemoryDataPlane,
    InMemoryFleet,
    InMemoryTrainer,
    PollCompletions,
    SnapshotStore,
    VirtualClock,
    WiringError,
    build_controller,
    configure_logging,
)
from quiesce.protocol import Coordinator, QuiesceConfig
from quiesce.protocol.controller import GroupOpened, Outcome, PeriodElapsed

Wire = Callable[[InMemoryFleet, VirtualClock, Path, InMemoryTrainer], Driver]


def _pieces(trainer: InMemoryTrainer) -> dict[str, Any]:
    return {"trainer": trainer, "data_plane": InMemoryDataPlane(trainer)}


def test_a_controller_without_completions_is_refused_at_construction(tmp_path: Path) -> None:
    clock = VirtualClock(seed=1)
    fleet = InMemoryFleet(clock, agents=1)
    with pytest.raises(WiringError) as refused:
        build_controller(
            fleet.participants, clock=clock, state_dir=tmp_path, **_pieces(InMemoryTrainer())
        )
    assert list(refused.value.missing) == ["completions"]
    assert "PollCompletions()" in str(refused.value)
    assert "on_completed" in str(refused.value)


def test_every_missing_piece_is_named_at_once() -> None:
    clock = VirtualClock(seed=1)
    with pytest.raises(WiringError) as refused:
        build_controller({}, clock=clock)
    assert set(refused.value.missing) == {
        "participants",
        "completions",
        "store",
        "trainer",
        "data_plane",
    }


def test_a_store_given_two_ways_is_refused(tmp_path: Path) -> None:
    clock = VirtualClock(seed=1)
    fleet = InMemoryFleet(clock, agents=1)
    with pytest.raises(WiringError, match="not both") as refused:
        build_controller(
            fleet.participants,
            clock=clock,
            completions=fleet,
            state_dir=tmp_path,
            store=SnapshotStore(tmp_path / "other"),
            **_pieces(InMemoryTrainer()),
        )
    assert list(refused.value.missing) == ["store"]


def test_a_participant_that_is_not_a_client_is_named(tmp_path: Path) -> None:
    clock = VirtualClock(seed=1)
    fleet = InMemoryFleet(clock, agents=1)
    with pytest.raises(WiringError, match=r"participants\['agent-0'\]"):
        build_controller(
            {"agent-0": object()},  # type: ignore[dict-item]
            clock=clock,
            completions=fleet,
            state_dir=tmp_path,
            **_pieces(InMemoryTrainer()),
        )


def test_poll_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        PollCompletions(interval_s=0)


def _one_checkpoint_with_a_rollout(wire: Wire, tmp_path: Path) -> tuple[Outcome, list[Any]]:
    """One rollout runs to completion, then one checkpoint: its outcome, and the logs."""
    configure_logging("debug")  # the repeated not_ready answers log at debug
    clock = VirtualClock(seed=3)

    async def main() -> Outcome:
        fleet = InMemoryFleet(clock, policies=1, agents=1, resources=1)
        driver = wire(fleet, clock, tmp_path, InMemoryTrainer())
        async with clock.task_group() as tg:
            tg.start_soon(fleet.run)
            tg.start_soon(driver.run)
            await driver.start()
            driver.submit(GroupOpened("p0", 1, "agent-0", "0"))
            await clock.sleep(30)  # the rollout completes meanwhile
            driver.submit(PeriodElapsed())
            await driver.wait_for(lambda _s: bool(driver.outcomes))
            driver.stop()
            fleet.stop()
        return driver.outcomes[0]

    with structlog.testing.capture_logs() as logs:
        outcome = anyio.run(clock.run, main)
    return outcome, logs


def _built(completions: str) -> Wire:
    def wire(
        fleet: InMemoryFleet, clock: VirtualClock, root: Path, trainer: InMemoryTrainer
    ) -> Driver:
        return build_controller(
            fleet.participants,
            clock=clock,
            completions=fleet if completions == "hook" else PollCompletions(),
            state_dir=root,
            depends_on=fleet.depends_on(),
            **_pieces(trainer),
        )

    return wire


@pytest.mark.parametrize("completions", ["hook", "poll"])
def test_a_built_controller_checkpoints_after_a_rollout(completions: str, tmp_path: Path) -> None:
    outcome, logs = _one_checkpoint_with_a_rollout(_built(completions), tmp_path)
    assert (outcome.result, outcome.reason) == ("completed", "completed")
    assert not [entry for entry in logs if entry["event"] == "checkpoint_not_ready"]


def _hand_built_without_completions(
    fleet: InMemoryFleet, clock: VirtualClock, root: Path, trainer: InMemoryTrainer
) -> Driver:
    # The mistake the builder refuses: nobody sets `fleet.on_completed`.
    return Driver(
        Coordinator(QuiesceConfig()),
        clock,
        fleet.participants,
        store=SnapshotStore(root / "snapshots"),
        journal=ControllerJournal(root / "controller"),
        depends_on=fleet.depends_on(),
        **_pieces(trainer),
    )


def test_a_prepare_that_times_out_names_who_was_not_ready(tmp_path: Path) -> None:
    outcome, logs = _one_checkpoint_with_a_rollout(_hand_built_without_completions, tmp_path)
    assert (outcome.result, outcome.reason) == ("failed", "timeout")
    [failed] = [entry for entry in logs if entry["event"] == "checkpoint_not_ready"]
    assert failed["checkpoint_id"] == str(outcome.checkpoint_id)
    assert failed["not_ready"] == {"agent-0": ["completed_unacknowledged:p0/0#0"]}
    # The retried prepares met the same blockers: logged once at info, then at debug.
    not_ready = [entry for entry in logs if entry["event"] == "prepare_not_ready"]
    assert [entry["log_level"] for entry in not_ready].count("info") == 1
    assert len(not_ready) > 1
