"""The controller process of `quiesce chaos`: the simulated training run over HTTP participants.

What lives here: one controller *process* -- the world of `quiesce simulate` (dataloader,
trainer loop, periodic trigger: `_simulation._World`, reused as is) driven on the real clock
against `quiesce serve` processes through `HttpParticipant`, with the filesystem snapshot
store and the intent journal of PROTOCOL.md §6 -- plus the two durable files the chaos
parent judges it by. What it does not know: that it will be killed. It starts, restores
from whatever the disk holds, trains until the data is used up, and exits; `quiesce chaos`
(`_chaos.py`) SIGKILLs it at random moments and starts it again on the same root.

The independent ledger (PROTOCOL.md §8), two append-only files the parent reads:
- `trained.log`: one JSON line per optimizer step, written and fsynced by the trainer when
  the step commits (`{"step", "items", "dataloader_position"}`). It *is* the trainer's
  checkpoint: a restarted controller replays it to find its anchor (every step is a
  checkpoint, `checkpoint_every=1`, so the lineage is never rolled back -- an item in two
  lines is a true duplicate). A line cut short by a kill never committed: the reader
  ignores it and the next writer truncates it.
- `consumed.log`: one line per prompt the dataloader hands out, written before the prompt
  is opened, across every rewind and restart.

Progress goes to the parent on stdout, one JSON object per line (logs go to stderr), each
stamped with `t`, the controller's clock (the event loop's, the host's monotonic clock: the
one the participants stamp their fence logs with, so a run report lines them up):

    {"event": "started", "pid": 123, "epoch": 4, "t": 5012.3}
    {"event": "restored", "kind": "snapshot", "snapshot_id": "ck-3-2-step5", ...}
    {"event": "phase", "phase": "capturing", "checkpoint_id": "ck-4-1-step6", "step": 6}
    {"event": "admission", "closed": true, "by": ["checkpoint"]}
    {"event": "metric", "name": "checkpoint.total_seconds", "value": 0.4, "checkpoint_id": ...}
    {"event": "outcome", "result": "completed", "checkpoint_id": "ck-4-1-step6", "step": 6,
     "reason": "ok"}
    {"event": "step", "step": 6}
    {"event": "done", "stop_reason": null, "intent_cleared": true}

Run it as `python -m quiesce.harness._chaos_controller CONFIG.json` (a
`ChaosControllerConfig`); the chaos parent writes the file.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio
import structlog
from pydantic import BaseModel, ConfigDict, Field

from quiesce.adapters import (
    CallFailedError,
    FinishedGroup,
    HttpParticipant,
    InMemoryDataPlane,
    InMemoryTrainer,
    RealClock,
    RestoreReport,
    TrainedBatch,
    configure_logging,
)
from quiesce.fsm import label
from quiesce.harness._simulate import SimulationConfig, _World
from quiesce.protocol import QuiesceConfig
from quiesce.protocol.controller import ControllerEffect, ControllerInput, ControllerState, Outcome
from quiesce.protocol.controller.lowlevel import Metric, Reply
from quiesce.protocol.machines import CheckpointState, GateState
from quiesce.protocol.wire import PrepareReply

__all__ = [
    "CONSUMED_LOG",
    "TRAINED_LOG",
    "ChaosControllerConfig",
    "DurableTrainer",
    "LoggedDataPlane",
    "chaos_protocol",
    "main",
    "read_consumed",
    "read_trained",
]

TRAINED_LOG = "trained.log"
CONSUMED_LOG = "consumed.log"

# The per-attempt metrics a run report charts over steps (`RunRecorder` reads the same two).
_REPORTED_METRICS = ("checkpoint.total_seconds", "checkpoint.admission_closed_s")


def chaos_protocol() -> QuiesceConfig:
    """Protocol settings for a run on the real clock that is killed every few seconds:
    short deadlines, a 1 s periodic trigger, and room for the consecutive failures a
    participant's restart (an interpreter start, about two seconds) causes."""
    return QuiesceConfig(
        rollout_timeout_s=30.0,
        prepare_timeout_s=3.0,
        control_timeout_s=2.0,
        prepare_retry_interval_s=0.05,
        snapshot_attempt_interval_s=1.0,
        save_period=1,
        max_consecutive_failures=1000,
        keep_latest_k=2,
    )


class ChaosControllerConfig(BaseModel):
    """What one controller process needs (written as JSON by the chaos parent)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    root: Path
    """Run directory: `snapshots/`, `controller/` (intent, epoch) and the two logs."""
    token_file: Path
    participants: dict[str, str]
    """Participant name -> base URL (`http://127.0.0.1:PORT`)."""
    agents: tuple[str, ...]
    resources: tuple[str, ...] = ()
    steps: int = Field(ge=1)
    groups_per_step: int = Field(default=2, ge=1)
    group_size: int = Field(default=2, ge=1)
    max_turns: int = Field(default=3, ge=1)
    seed: int = 0
    poll_interval_s: float = Field(default=0.05, gt=0)
    time_limit_s: float = Field(default=600.0, gt=0)
    protocol: QuiesceConfig = Field(default_factory=chaos_protocol)


# --------------------------------------------------------------------------- the ledger


def _append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and fsync it: the line is durable when this returns."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(record, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _complete_lines(path: Path) -> list[dict[str, Any]]:
    """Every complete line of an append-only log (a torn last line never committed)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n")
    return [json.loads(line) for line in data[: end + 1].splitlines() if line.strip()]


def _truncate_torn_tail(path: Path) -> None:
    """Drop a line a kill cut short, so the next append starts on a fresh line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with path.open("r+b") as handle:
            handle.truncate(end)
            os.fsync(handle.fileno())


def read_trained(root: Path) -> list[TrainedBatch]:
    """The committed optimizer steps of `root/trained.log`, oldest first."""
    return [
        TrainedBatch(
            int(line["step"]), int(line["step"]), tuple((int(p), int(s)) for p, s in line["items"])
        )
        for line in _complete_lines(root / TRAINED_LOG)
    ]


def read_consumed(root: Path) -> list[int]:
    """Every prompt the dataloaders of `root` handed out, in order, across restarts."""
    return [int(line["prompt"]) for line in _complete_lines(root / CONSUMED_LOG)]


class DurableTrainer(InMemoryTrainer):
    """An `InMemoryTrainer` whose checkpoint is `trained.log`: each committed step is
    appended and fsynced before `finish_optimizer_step` returns, and `open` replays the
    log, so a killed process restarts at its last committed step.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> trainer = DurableTrainer.open(root)
    >>> _ = trainer.optimizer_step([FinishedGroup(prompt_id=0, siblings=(0, 1))],
    ...     dataloader_position=1)
    >>> DurableTrainer.open(root).anchor()
    TrainerCheckpoint(step=1, version=1, dataloader_position=1)
    """

    def __init__(self, root: Path) -> None:
        super().__init__(checkpoint_every=1)
        self.log_path = root / TRAINED_LOG
        self._replaying = False

    @classmethod
    def open(cls, root: Path) -> DurableTrainer:
        """The trainer of `root`, at the last step its log committed."""
        trainer = cls(root)
        _truncate_torn_tail(trainer.log_path)
        trainer._replaying = True
        try:
            for line in _complete_lines(trainer.log_path):
                groups: dict[int, list[int]] = {}
                for prompt, sibling in line["items"]:
                    groups.setdefault(int(prompt), []).append(int(sibling))
                trainer.optimizer_step(
                    [FinishedGroup(prompt_id=p, siblings=tuple(s)) for p, s in groups.items()],
                    dataloader_position=int(line["dataloader_position"]),
                )
        finally:
            trainer._replaying = False
        return trainer

    def finish_optimizer_step(self, *, dataloader_position: int) -> TrainedBatch:
        """Commit the step: durable in `trained.log` first, then in memory."""
        if self._pending is None or self._replaying:
            return super().finish_optimizer_step(dataloader_position=dataloader_position)
        record = {
            "step": self.step + 1,
            "items": [list(item) for item in self._pending],
            "dataloader_position": dataloader_position,
        }
        _append_line(self.log_path, record)
        return super().finish_optimizer_step(dataloader_position=dataloader_position)


class LoggedDataPlane(InMemoryDataPlane):
    """An `InMemoryDataPlane` that appends every prompt it hands out to `consumed.log`."""

    def __init__(self, trainer: InMemoryTrainer, root: Path) -> None:
        super().__init__(trainer)
        self.log_path = root / CONSUMED_LOG
        _truncate_torn_tail(self.log_path)

    def next_prompt(self) -> int:
        """Consume the next prompt, durably noted before anyone sees it."""
        prompt = super().next_prompt()
        _append_line(self.log_path, {"prompt": prompt})
        return prompt


# --------------------------------------------------------------------------- the world


class _ChaosWorld(_World):
    """The simulation's world around one controller, on the real clock over HTTP.

    Reuses `_World`'s dataloader, trainer loop, periodic trigger and reactions; its
    participants are HTTP clients (completions are polled from the agents, which have no
    callback to a controller in another process), and it reports progress on `events`.
    """

    def __init__(self, config: ChaosControllerConfig, clients: dict[str, HttpParticipant]) -> None:
        trainer = DurableTrainer.open(config.root)
        super().__init__(
            SimulationConfig(
                steps=config.steps,
                groups_per_step=config.groups_per_step,
                group_size=config.group_size,
                agents=len(config.agents),
                max_turns=config.max_turns,
                seed=config.seed,
                time_limit_s=config.time_limit_s,
            ),
            RealClock(seed=config.seed),
            config.root,
            protocol=config.protocol,
            participants=clients,
            depends_on=tuple((agent, config.resources) for agent in config.agents),
            trainer=trainer,
            plane=LoggedDataPlane(trainer, config.root),
            observers=[self._announce],
            progress=self._step_done,
        )
        self.chaos = config
        self.events: TextIO = sys.stdout
        self._announced = CheckpointState.IDLE
        self._gate = GateState.OPEN
        self._op: str | None = None  # the attempt a metric belongs to (the latest one)
        self._log = structlog.get_logger("quiesce.chaos")

    def emit(self, event: str, **fields: Any) -> None:
        """One progress line for the chaos parent (flushed: the parent kills on it), stamped
        with this process's clock (`t`)."""
        line = {"event": event, "t": self.clock.now(), **fields}
        self.events.write(json.dumps(line, sort_keys=True) + "\n")
        self.events.flush()

    def _step_done(self, step: int) -> None:
        self.emit("step", step=step)

    def _announce(
        self, event: ControllerInput, effects: tuple[ControllerEffect, ...], state: ControllerState
    ) -> None:
        attempt = state.attempt
        if attempt is not None:
            self._op = str(attempt.op_id)
        if state.phase is not self._announced:
            self._announced = state.phase
            self.emit(
                "phase",
                phase=label(state.phase),
                checkpoint_id=str(attempt.op_id) if attempt is not None else None,
                step=attempt.op_id.step if attempt is not None else None,
            )
        if state.gate.state is not self._gate:
            self._gate = state.gate.state
            self.emit(
                "admission",
                closed=self._gate is GateState.CLOSED,
                by=sorted(holder.value for holder in state.gate.data),
            )
        result = event.result if isinstance(event, Reply) else None
        if isinstance(result, PrepareReply) and result.status == "not_ready":
            # Why a prepare waits is the first question when a chaos run stalls.
            self._log.info(
                "prepare_not_ready",
                participant=result.participant,
                checkpoint_id=str(result.op_id),
                blockers=list(result.blockers),
            )
        outcome: Outcome | None = None
        for effect in effects:
            if isinstance(effect, Outcome):
                outcome = effect
                self.emit(
                    "outcome",
                    result=effect.result,
                    checkpoint_id=str(effect.checkpoint_id),
                    step=effect.checkpoint_id.step,
                    reason=effect.reason,
                )
            elif isinstance(effect, Metric) and effect.name in _REPORTED_METRICS:
                self.emit(
                    "metric",
                    name=effect.name,
                    value=effect.value,
                    checkpoint_id=self._op if outcome is None else str(outcome.checkpoint_id),
                )

    async def main(self) -> None:
        """Run this process's controller until the data is used up (or it stops), beside
        the completion poller; announce the start and the end on `events`."""
        self.emit("started", pid=os.getpid(), epoch=self.journal.epoch())
        async with self.clock.task_group() as tg:
            tg.start_soon(self._poll_completions, name="completions")
            await self._controller()
            tg.cancel()
        report = self.tally.restores[0] if self.tally.restores else None
        self.emit(
            "done",
            stop_reason=self.stop_reason,
            steps=self.trainer.step,
            restore=None if report is None else report.kind,
            intent_cleared=self.journal.read_intent() is None,
        )

    def restored(self, report: RestoreReport) -> None:
        """Tell the chaos parent what the start restored (its verdicts check it)."""
        self.emit(
            "restored",
            kind=report.kind,
            snapshot_id=report.snapshot_id,
            intent=report.intent,
            intent_action=report.intent_action,
            redispatched=report.redispatched,
            released_orphans=report.released_orphans,
            step=self.trainer.step,
        )

    async def _poll_completions(self) -> None:
        """Report each agent's completed-but-unACKed receipts once per process.

        Polling starts after the restore: completions the restored ledger does not own
        were ACKed by the restore itself (`Driver.start`), the others are this ledger's.
        """
        reported: set[tuple[str, int, str]] = set()
        while self.driver is None or self.driver.restore_report is None:
            await self.clock.sleep(self.chaos.poll_interval_s)
            if self.done.is_set():
                return
        first = True
        while not self.done.is_set():
            if not first:
                await self.clock.sleep(self.chaos.poll_interval_s)
            first = False
            driver = self.driver
            if driver is None or not driver.alive:
                return
            for agent in self.agents:
                try:
                    reply = await self.participants[agent].completions(
                        deadline_at=self.clock.now() + self.protocol.control_timeout_s
                    )
                except CallFailedError:
                    continue  # the agent is down or restarting: ask again next round
                for receipt in reply.receipts:
                    key = (receipt.rollout_id, receipt.attempt, receipt.receipt)
                    if key not in reported:
                        reported.add(key)
                        driver.completed(agent, receipt)


def _load_config(path: Path) -> ChaosControllerConfig:
    return ChaosControllerConfig.model_validate_json(path.read_bytes())


async def _run(config: ChaosControllerConfig) -> str | None:
    token = config.token_file.read_text().strip()
    clients = {
        name: HttpParticipant(
            url, token=token, name=name, timeout_s=config.protocol.control_timeout_s
        )
        for name, url in sorted(config.participants.items())
    }
    world = _ChaosWorld(config, clients)
    try:
        await world.main()
    finally:
        for client in clients.values():
            await client.aclose()
    return world.stop_reason


def main(argv: Sequence[str] | None = None) -> int:
    """Run one controller process: `python -m quiesce.harness._chaos_controller CFG.json`.
    Exit 0 when the run finished its data, 1 when the controller stopped first."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m quiesce.harness._chaos_controller CONFIG.json", file=sys.stderr)
        return 2
    config = _load_config(Path(args[0]))
    configure_logging(os.environ.get("QUIESCE_LOG_LEVEL", "info"), json_logs=True)
    reason = anyio.run(_run, config)
    return 0 if reason is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
