"""What a run report draws: a timeline recorded while a simulated run plays.

What lives here: `RunRecorder`, which listens to one `quiesce simulate` run from the outside
-- every controller step (a driver `Observer`), every request a participant handled (a
`FenceLogSink`: the fence before and after), every fault the in-memory fleet injects, and the
world's controller starts and crash -- and keeps what happened when, as plain data
(`document()`). What it does not know: HTML (`render_report` draws the document) or the
protocol's decisions (it reads the states and effects the coordinator and participants
produced; it never steps a table).

The document (JSON): `lanes` (the controller, then every participant), `spans` (an interval
on a lane: a checkpoint phase, an admission-closed window, a non-idle fence state, a
restore, executions running / parked / frozen), `marks` (an instant: an attempt's outcome,
an injected fault, a participant restart, the controller crash), `steps` (per training step:
checkpoint seconds, admission closed, attempts by outcome and cause, items trained, goodput)
and the run's `summary` (the `SimulationResult`). Times are the virtual clock's seconds.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from quiesce.adapters import Clock, FaultKind, FenceLogLine, FenceLogSink, InMemoryFleet
from quiesce.protocol.controller import (
    ControllerEffect,
    ControllerInput,
    ControllerState,
    Dispatch,
    GroupTrained,
    Metric,
    OptimizerStepEnd,
    Outcome,
    Redispatch,
    RestoreOutcome,
)
from quiesce.protocol.machines import CheckpointState, ExecState, GateState
from quiesce.protocol.participant import AgentRole

__all__ = ["EVENT_KINDS", "RunRecorder"]

EVENT_KINDS = (
    "phase",
    "admission",
    "restore",
    "fence",
    "running",
    "parked",
    "frozen",
    "outcome",
    "fault",
    "restart",
    "crash",
)
"""Every kind of span or mark a report draws (the legend lists them)."""

CONTROLLER = "controller"

# Execution states drawn, and the lane row each is counted in (park_requested is running).
_EXEC_KIND = {
    ExecState.RUNNING: "running",
    ExecState.PARK_REQUESTED: "running",
    ExecState.PARKED: "parked",
    ExecState.FROZEN: "frozen",
}


@dataclass
class _Attempt:
    step: int
    seconds: float = 0.0
    admission_s: float = 0.0
    outcome: str = ""
    reason: str = ""


@dataclass
class _Step:
    step: int
    at: float
    groups: int = 0
    reruns: int = 0  # how often this step number was trained again after a rollback


@dataclass
class _Open:
    kind: str
    label: str
    since: float
    tip: dict[str, Any] = field(default_factory=dict)


class RunRecorder(FenceLogSink):
    """Records one simulated run's timeline (`simulate(..., recorder=RunRecorder())`), for
    `render_report`.

    >>> from quiesce.harness import simulate
    >>> recorder = RunRecorder()
    >>> result = simulate(steps=2, groups_per_step=2, group_size=2, seed=1, recorder=recorder)
    >>> doc = recorder.document()
    >>> [lane["name"] for lane in doc["lanes"]][:2], len(doc["steps"])
    (['controller', 'agent-0'], 2)
    """

    def __init__(self) -> None:
        self._clock: Clock | None = None
        self._fleet: InMemoryFleet | None = None
        self.spans: list[dict[str, Any]] = []
        self.marks: list[dict[str, Any]] = []
        self._open: dict[tuple[str, str], _Open] = {}  # (lane, slot) -> its open span
        self._phase = CheckpointState.IDLE
        self._gate = GateState.OPEN
        self._op: str | None = None
        self._attempts: dict[str, _Attempt] = {}
        self._steps: dict[int, _Step] = {}
        self._trained_step: int | None = None
        self._executions: dict[str, tuple[int, int, int]] = {}
        self._restore_started: float = 0.0
        self._redispatched: list[str] = []
        self._summary: dict[str, Any] | None = None
        self._end = 0.0
        self._group_size = 1

    # ------------------------------------------------------------------ wiring

    def attach(self, clock: Clock, fleet: InMemoryFleet, group_size: int) -> None:
        """Listen to `fleet` (its faults) on `clock`; groups have `group_size` siblings
        (called by the simulation)."""
        self._clock = clock
        self._fleet = fleet
        self._group_size = group_size
        fleet.on_fault = self.fault

    def _now(self) -> float:
        return 0.0 if self._clock is None else self._clock.now()

    def _begin(self, lane: str, slot: str, kind: str, label: str, **tip: Any) -> None:
        self._end_span(lane, slot)
        self._open[lane, slot] = _Open(kind, label, self._now(), tip)

    def _end_span(self, lane: str, slot: str, **tip: Any) -> None:
        found = self._open.pop((lane, slot), None)
        if found is None:
            return
        now = self._now()
        self.spans.append(
            {
                "lane": lane,
                "kind": found.kind,
                "label": found.label,
                "t0": round(found.since, 6),
                "t1": round(now, 6),
                "tip": {**found.tip, **tip, "seconds": round(now - found.since, 6)},
            }
        )

    def _mark(self, lane: str, kind: str, label: str, **tip: Any) -> None:
        self.marks.append(
            {"lane": lane, "kind": kind, "label": label, "t": round(self._now(), 6), "tip": tip}
        )

    # ------------------------------------------------------------------ the world's hooks

    def controller_started(self) -> None:
        """A controller process starts: its restore begins."""
        self._restore_started = self._now()
        self._redispatched = []
        self._phase, self._gate = CheckpointState.IDLE, GateState.OPEN

    def controller_crashed(self, step: int) -> None:
        """The world crashed the controller at training step `step`."""
        for lane, slot in [key for key in self._open if key[0] == CONTROLLER]:
            self._end_span(lane, slot, cut_by="controller crash")
        self._mark(CONTROLLER, "crash", "controller crash", step=step)

    def fault(self, participant: str, op: str, kind: FaultKind) -> None:
        """The fleet injected `kind` into a call of `op` to `participant`."""
        if kind is FaultKind.CRASH_RESTART:
            self._mark(participant, "restart", "restart", op=op, fault=kind.value)
        else:
            self._mark(participant, "fault", kind.value, op=op)

    # ------------------------------------------------------------------ participants

    def record(self, line: FenceLogLine) -> None:
        before, after = line.before.state.value, line.after.state.value
        if before != after or (line.participant, "fence") not in self._open:
            if after == "idle":
                self._end_span(line.participant, "fence", ended_by=line.op)
            else:
                active = line.after.active
                self._begin(
                    line.participant,
                    "fence",
                    "fence",
                    after,
                    state=after,
                    op=line.op,
                    op_id=None if active is None else str(active),
                    incarnation=line.incarnation,
                )
        self._sample_executions()

    def _sample_executions(self) -> None:
        if self._fleet is None:
            return
        for name, host in self._fleet.hosts.items():
            role = host.state.role
            if not isinstance(role, AgentRole):
                continue
            counts = Counter(_EXEC_KIND.get(e.state) for e in role.executions)
            now = (counts["running"], counts["parked"], counts["frozen"])
            if self._executions.get(name) == now:
                continue
            self._executions[name] = now
            for kind, count in zip(("running", "parked", "frozen"), now, strict=True):
                slot = f"exec-{kind}"
                opened = self._open.get((name, slot))
                if opened is not None and opened.tip.get("executions") == count:
                    continue
                self._end_span(name, slot)
                if count:
                    self._begin(name, slot, kind, f"{count} {kind}", executions=count)

    # ------------------------------------------------------------------ the controller

    def observe(
        self, event: ControllerInput, effects: tuple[ControllerEffect, ...], state: ControllerState
    ) -> None:
        """A driver `Observer`: one controller step."""
        self._end = self._now()
        self._controller_state(state)
        self._training(event)
        outcome: Outcome | None = None
        for effect in effects:
            if isinstance(effect, Outcome):
                outcome = effect
                self._outcome(effect)
            elif isinstance(effect, Metric):
                self._metric(effect, outcome)
            elif isinstance(effect, Redispatch):
                self._redispatched.append(f"{effect.group_id} at {effect.level}")
            elif isinstance(effect, Dispatch) and effect.resume_from_turn:
                self._redispatched.append(
                    f"{effect.rollout_id}#{effect.attempt} from turn {effect.resume_from_turn}"
                )
            elif isinstance(effect, RestoreOutcome):
                self._restored(effect)
        self._sample_executions()

    def _controller_state(self, state: ControllerState) -> None:
        attempt = state.attempt
        if attempt is not None:
            self._op = str(attempt.op_id)
            self._attempts.setdefault(self._op, _Attempt(attempt.op_id.step))
        phase = state.phase
        if phase is not self._phase:
            self._phase = phase
            if phase is CheckpointState.IDLE:
                self._end_span(CONTROLLER, "phase")
            else:
                self._begin(CONTROLLER, "phase", "phase", phase.value, checkpoint_id=self._op)
        gate = state.gate.state
        if gate is not self._gate:
            self._gate = gate
            if gate is GateState.CLOSED:
                holders = sorted(h.value for h in state.gate.data)
                self._begin(CONTROLLER, "admission", "admission", "admission closed", by=holders)
            else:
                self._end_span(CONTROLLER, "admission")

    def _training(self, event: ControllerInput) -> None:
        if isinstance(event, OptimizerStepEnd):
            previous = self._steps.get(event.step)
            self._steps[event.step] = _Step(
                event.step, self._now(), reruns=0 if previous is None else previous.reruns + 1
            )
            self._trained_step = event.step
        elif isinstance(event, GroupTrained) and self._trained_step is not None:
            self._steps[self._trained_step].groups += 1

    def _outcome(self, outcome: Outcome) -> None:
        op = str(outcome.checkpoint_id)
        attempt = self._attempts.setdefault(op, _Attempt(outcome.checkpoint_id.step))
        attempt.outcome, attempt.reason = outcome.result, outcome.reason
        self._mark(
            CONTROLLER,
            "outcome",
            outcome.result,
            checkpoint_id=op,
            reason=outcome.reason,
            retryable=outcome.retryable,
            consecutive_failures=outcome.consecutive_failures,
        )

    def _metric(self, metric: Metric, outcome: Outcome | None) -> None:
        op = str(outcome.checkpoint_id) if outcome is not None else self._op
        attempt = None if op is None else self._attempts.get(op)
        if attempt is None:
            return
        if metric.name == "checkpoint.total_seconds":
            attempt.seconds += metric.value
        elif metric.name == "checkpoint.admission_closed_s":
            attempt.admission_s += metric.value

    def _restored(self, outcome: RestoreOutcome) -> None:
        opened = _Open("restore", outcome.result, self._restore_started)
        self._open[CONTROLLER, "restore"] = opened
        self._end_span(
            CONTROLLER,
            "restore",
            result=outcome.result,
            snapshot=None if outcome.snapshot_id is None else str(outcome.snapshot_id),
            intent=None if outcome.intent is None else str(outcome.intent),
            intent_action=outcome.intent_action,
            redispatched=list(self._redispatched),
            **dict(outcome.metrics),
        )
        self._redispatched = []

    # ------------------------------------------------------------------ the document

    def finish(self, summary: dict[str, Any]) -> None:
        """The run ended with `summary` (the `SimulationResult` as JSON): close what is open."""
        for lane, slot in list(self._open):
            self._end_span(lane, slot, open_at_end=True)
        self._summary = summary
        self._end = max(self._end, self._now())

    def _lanes(self) -> list[dict[str, str]]:
        lanes = [{"name": CONTROLLER, "role": CONTROLLER}]
        if self._fleet is not None:
            order = {"agent": 0, "policy": 1, "resources": 2}
            members = sorted(
                self._fleet.hosts.items(),
                key=lambda item: (order.get(item[1].config.role.value, 3), item[0]),
            )
            lanes += [{"name": name, "role": host.config.role.value} for name, host in members]
        return lanes

    def _step_rows(self, group_size: int) -> list[dict[str, Any]]:
        by_step: dict[int, list[_Attempt]] = {}
        for attempt in self._attempts.values():
            if attempt.outcome:
                by_step.setdefault(attempt.step, []).append(attempt)
        rows = []
        previous_at = 0.0
        for number in sorted(self._steps):
            step = self._steps[number]
            attempts = by_step.get(number, [])
            items = step.groups * group_size
            spent = max(step.at - previous_at, 1e-9)
            rows.append(
                {
                    "step": number,
                    "t0": round(previous_at, 6),
                    "t1": round(step.at, 6),
                    "checkpoint_s": round(sum(a.seconds for a in attempts), 6),
                    "admission_closed_s": round(sum(a.admission_s for a in attempts), 6),
                    "completed": sum(a.outcome == "completed" for a in attempts),
                    "skipped": sum(a.outcome == "skipped" for a in attempts),
                    "failed": dict(
                        sorted(Counter(a.reason for a in attempts if a.outcome == "failed").items())
                    ),
                    "items": items,
                    "goodput": round(items / spent, 6),
                    "reruns": step.reruns,
                }
            )
            previous_at = step.at
        return rows

    def document(self) -> dict[str, Any]:
        """The recorded run as plain data (JSON-ready): what `render_report` draws."""
        summary = self._summary or {}
        return {
            "title": f"quiesce simulate (seed {summary.get('seed', '?')})",
            "end": round(self._end, 6),
            "kinds": list(EVENT_KINDS),
            "lanes": self._lanes(),
            "spans": self.spans,
            "marks": self.marks,
            "steps": self._step_rows(self._group_size),
            "summary": summary,
        }
