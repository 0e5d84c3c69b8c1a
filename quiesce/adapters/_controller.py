"""Embedding a controller: one call that builds a `Driver` with every piece wired.

What lives here: `build_controller`, which takes your participants and the pieces a
controller cannot run without -- where completions come from, where snapshots and the
intent record live, the trainer and the data plane -- and refuses at construction, with a
`WiringError` naming each missing piece and how to supply it, what a hand-built `Driver`
would only show as a stall (every checkpoint with rollouts waiting 300 virtual seconds in
`preparing`, then failing `timeout`). And `PollCompletions`, the completion source for
participants that cannot call back (HTTP, Ray, your own): the controller asks each agent
for its completed-but-unACKed receipts. What it does not know: the protocol.

>>> import tempfile
>>> from quiesce.adapters import InMemoryDataPlane, InMemoryFleet, InMemoryTrainer
>>> from quiesce.adapters import VirtualClock
>>> clock = VirtualClock(seed=1)
>>> fleet = InMemoryFleet(clock, agents=1)
>>> trainer = InMemoryTrainer()
>>> build_controller(fleet.participants, clock=clock, state_dir=tempfile.mkdtemp(),
...     trainer=trainer, data_plane=InMemoryDataPlane(trainer))
Traceback (most recent call last):
...
quiesce.adapters._controller.WiringError: the controller is missing completions: ...
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from quiesce.adapters._clock import Clock
from quiesce.adapters._driver import Companion, Driver
from quiesce.adapters._intent import ControllerJournal
from quiesce.adapters._participant_api import CallFailedError, Participant
from quiesce.adapters._snapshot_store import SnapshotStore
from quiesce.adapters._trainer import DataPlane, Trainer
from quiesce.fsm import QuiesceError
from quiesce.protocol import Coordinator, QuiesceConfig
from quiesce.protocol.wire import Receipt, Role

__all__ = ["CompletionHook", "PollCompletions", "WiringError", "build_controller"]


class WiringError(QuiesceError):
    """`build_controller` was not given every piece a controller needs.

    `missing` maps each missing (or conflicting) piece to how to supply it; the message
    lists them all, so one attempt shows every fix."""

    def __init__(self, missing: Mapping[str, str]) -> None:
        self.missing = dict(missing)
        fixes = "; ".join(f"{piece}: {fix}" for piece, fix in self.missing.items())
        super().__init__(f"the controller is missing {', '.join(self.missing)}: {fixes}")


class CompletionHook(Protocol):
    """A completion source that calls back (an `InMemoryFleet`): `build_controller` sets
    its `on_completed(participant, receipt)` to the controller it builds."""

    on_completed: Callable[[str, Receipt], None] | None


@dataclass(frozen=True, slots=True)
class PollCompletions:
    """A completion source for participants that cannot call back: once the controller
    has restored, every `interval_s` it asks each agent for its completed-but-unACKed
    receipts (`Participant.completions()`) and reports each receipt once. An agent that
    does not answer is asked again next round.

    >>> PollCompletions(interval_s=0.5).interval_s
    0.5
    """

    interval_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"interval_s must be > 0 seconds, got {self.interval_s}")

    async def __call__(self, driver: Driver) -> None:
        """Poll for `driver` until it stops (run as one of its `companions`)."""
        # Before the restore ends, `Driver.start` itself reports what agents hold.
        await driver.wait_for(lambda _state: driver.restore_report is not None)
        reported: set[tuple[str, str, int, str]] = set()
        while driver.alive:
            for agent in _agents(driver):
                deadline = driver.clock.now() + driver.config.control_timeout_s
                try:
                    reply = await driver.participants[agent].completions(deadline_at=deadline)
                except CallFailedError:
                    continue  # down or restarting: asked again next round
                for receipt in reply.receipts:
                    key = (agent, receipt.rollout_id, receipt.attempt, receipt.receipt)
                    if key not in reported:
                        reported.add(key)
                        driver.completed(agent, receipt)
            await driver.clock.sleep(self.interval_s)


def _agents(driver: Driver) -> list[str]:
    fleet = driver.state.fleet
    if fleet is None:
        return []
    return [name for name in sorted(driver.participants) if fleet.role_of(name) is Role.AGENT]


_COMPLETIONS_FIX = (
    "pass completions=<fleet> (a source with an `on_completed` hook, e.g. InMemoryFleet) "
    "or completions=PollCompletions() (the controller asks each agent); without one, "
    "agents' results are never ACKed and every checkpoint with rollouts times out in prepare"
)
_STORE_FIX = (
    "pass state_dir=<directory> (snapshots and the intent record under it), "
    "or both store=SnapshotStore(...) and journal=ControllerJournal(...)"
)


def build_controller(
    participants: Mapping[str, Participant] | Iterable[Participant],
    *,
    clock: Clock,
    completions: CompletionHook | PollCompletions | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    store: SnapshotStore | None = None,
    journal: ControllerJournal | None = None,
    trainer: Trainer | None = None,
    data_plane: DataPlane | None = None,
    config: QuiesceConfig | None = None,
    companions: Iterable[Companion] = (),
    **driver_options: Any,
) -> Driver:
    """A `Driver` over `participants` (by name, or clients named by their `.name`), with
    completions, discovery and the store wired. Run it as any driver:
    `tg.start_soon(driver.run)`, then `await driver.start()`.

    - `completions`: a `CompletionHook` (its `on_completed` is set to this controller;
      building a successor after a crash re-points it) or `PollCompletions(...)`;
    - `state_dir`: snapshots in `state_dir/snapshots`, the intent record and epoch in
      `state_dir/controller` -- or pass `store` and `journal` yourself (not both ways);
    - `trainer`, `data_plane`: the trainer (its anchor is where a restore starts) and the
      data plane (queue, dataloader cut);
    - `config`: the protocol configuration (default `QuiesceConfig()`);
    - `driver_options`: the `Driver`'s own options (`depends_on`, `observers`, `turns`, ...).

    Raises `WiringError` naming every missing or conflicting piece and how to supply it.
    """
    clients = _clients(participants)
    missing: dict[str, str] = {}
    if not clients:
        missing["participants"] = "pass at least one Participant client"
    for name, client in clients.items():
        if not isinstance(client, Participant):
            missing[f"participants[{name!r}]"] = (
                f"got {type(client).__name__}; subclass quiesce.adapters.Participant"
            )
    if completions is None or not (
        isinstance(completions, PollCompletions) or hasattr(completions, "on_completed")
    ):
        missing["completions"] = _COMPLETIONS_FIX
    if state_dir is not None and (store is not None or journal is not None):
        missing["store"] = "pass state_dir or store and journal, not both: " + _STORE_FIX
    elif state_dir is None and (store is None or journal is None):
        missing["store"] = _STORE_FIX
    if trainer is None:
        missing["trainer"] = "pass trainer=<your Trainer> (InMemoryTrainer() for a trial)"
    if data_plane is None:
        missing["data_plane"] = (
            "pass data_plane=<your DataPlane> (InMemoryDataPlane(trainer) for a trial)"
        )
    if missing:
        raise WiringError(missing)
    assert trainer is not None and data_plane is not None and completions is not None
    if state_dir is not None:
        root = Path(state_dir)
        store, journal = SnapshotStore(root / "snapshots"), ControllerJournal(root / "controller")
    assert store is not None and journal is not None
    extra: tuple[Companion, ...] = ()
    if isinstance(completions, PollCompletions):
        extra = (completions,)
    driver = Driver(
        Coordinator(config or QuiesceConfig()),
        clock,
        clients,
        store=store,
        journal=journal,
        trainer=trainer,
        data_plane=data_plane,
        companions=(*companions, *extra),
        **driver_options,
    )
    if not isinstance(completions, PollCompletions):
        completions.on_completed = driver.completed
    return driver


def _clients(
    participants: Mapping[str, Participant] | Iterable[Participant],
) -> dict[str, Participant]:
    if isinstance(participants, Mapping):
        return dict(participants)
    return {client.name: client for client in participants}
