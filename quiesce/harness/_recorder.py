"""What a run report draws: a timeline recorded while a simulated or a chaos run plays.

What lives here: `RunRecorder`, which listens to one `quiesce simulate` run from the outside
-- every controller step (a driver `Observer`), every request a participant handled (a
`FenceLogSink`: the fence before and after), every fault the in-memory fleet injects, and the
world's controller starts and crash -- and keeps what happened when, as plain data
(`document()`); and `ChaosRecorder`, the same for a `quiesce chaos` run, whose controller and
participants are other processes: it is fed their event lines and fence logs, and the
parent's kills and restarts. What it does not know: HTML (`render_report` draws the
document) or the protocol's decisions (it reads the states and effects the coordinator and
participants produced; it never steps a table).

The document (JSON): `lanes` (the controller, then every participant), `spans` (an interval
on a lane: a checkpoint phase, an admission-closed window, a non-idle fence state, a
restore, executions running / parked / frozen), `marks` (an instant: an attempt's outcome,
an injected fault, a restart, the controller crash, a SIGKILL), `steps` (per training step:
checkpoint seconds, admission closed, attempts by outcome and cause, items trained, goodput),
the run's `summary` (the `SimulationResult` or `ChaosResult`) and `headline` (what the page
prints under its title), `clock` (which clock the seconds are on: the virtual clock's, or
the host's monotonic clock in a chaos run) and `unmeasured` (each kind the run has no data
for, and why: the page says so and draws nothing for it).
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
    GroupTrained,
    OptimizerStepEnd,
    Outcome,
)
from quiesce.protocol.controller.lowlevel import Dispatch, Metric, Redispatch, RestoreOutcome
from quiesce.protocol.machines import CheckpointState, ExecState, GateState
from quiesce.protocol.participant import AgentRole

__all__ = ["EVENT_KINDS", "ChaosRecorder", "RunRecorder"]

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
    "kill",
)
"""Every kind of span or mark a report draws (the legend lists them; a run that cannot
measure a kind says so in its document's `unmeasured`)."""

SIMULATE_CLOCK = "the simulation's virtual clock, in seconds from the run's start"

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
    items: int | None = None  # items trained, when known directly (else groups x size)


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
        self._training_began = 0.0  # where the first step's window starts
        self._group_size = 1
        self.title = "quiesce simulate"
        self.clock = SIMULATE_CLOCK
        self.unmeasured: dict[str, str] = {
            "kill": "simulate kills no process: its controller crash is drawn as a crash"
        }

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
        previous_at = self._training_began
        for number in sorted(self._steps):
            step = self._steps[number]
            attempts = by_step.get(number, [])
            items = step.items if step.items is not None else step.groups * group_size
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

    def _headline(self) -> list[tuple[str, Any]]:
        """The summary line under the title: (what, value) pairs."""
        s = self._summary or {}
        c, r = s.get("checkpoints", {}), s.get("rollouts", {})
        return [
            ("verdict", s.get("verdict")),
            ("steps", s.get("steps")),
            (
                "checkpoints completed / skipped / failed",
                f"{c.get('completed')} / {c.get('skipped')} / {c.get('failed')}",
            ),
            ("faults", s.get("faults_injected")),
            ("participant restarts", s.get("participant_restarts")),
            ("controller crash at step", s.get("crashed_at_step")),
            (
                "redispatched (resumed / rerun)",
                f"{r.get('redispatched')} ({r.get('resumed_from_turn')} / "
                f"{r.get('rerun_from_scratch')})",
            ),
            ("lost / duplicated", f"{r.get('lost')} / {r.get('duplicated')}"),
            ("virtual seconds", s.get("virtual_seconds")),
        ]

    def document(self) -> dict[str, Any]:
        """The recorded run as plain data (JSON-ready): what `render_report` draws."""
        summary = self._summary or {}
        return {
            "title": f"{self.title} (seed {summary.get('seed', '?')})",
            "clock": self.clock,
            "headline": [list(pair) for pair in self._headline()],
            "unmeasured": dict(self.unmeasured),
            "end": round(self._end, 6),
            "kinds": list(EVENT_KINDS),
            "lanes": self._lanes(),
            "spans": self.spans,
            "marks": self.marks,
            "steps": self._step_rows(self._group_size),
            "summary": summary,
        }


CHAOS_CLOCK = (
    "the host's monotonic clock (CLOCK_MONOTONIC, shared by every process on the host), in "
    "seconds from the chaos run's start: the controller stamps its own events, each "
    "participant's fence log stamps its requests (its event loop's clock), the chaos parent "
    "stamps its kills and restarts"
)

_IN_AGENTS = (
    "not measured in chaos: executions live inside the agent processes, whose fence log "
    "records only the fence"
)
CHAOS_UNMEASURED = {
    "running": _IN_AGENTS,
    "parked": _IN_AGENTS,
    "frozen": _IN_AGENTS,
    "fault": "none in chaos: it injects no network faults, its faults are the kills",
    "crash": "none in chaos: a controller SIGKILL is drawn as a kill",
}
"""Kinds a chaos run has no data for, and why (the page says so instead of drawing them)."""


class ChaosRecorder(RunRecorder):
    """Records one `quiesce chaos` run, whose parts run in separate processes
    (`run_chaos(..., recorder=ChaosRecorder())`), for `render_report`.

    Every entry point takes `t`, a time on the host's monotonic clock (`time.monotonic()`,
    the clock the controller's and the participants' event loops read too); the page draws
    `t - origin` (`run_chaos` sets `origin` to its start). The controller's events arrive
    as the lines its process writes (`phase`, `admission`, `outcome`, `metric`, `started`,
    `restored`, `step`), the participants' fences as their fence-log lines (`record`), the
    kills and restarts from the parent.

    >>> recorder = ChaosRecorder(origin=100.0)
    >>> recorder.set_lanes([("controller", "controller"), ("agent-0", "agent")])
    >>> recorder.phase(101.0, "preparing", "ck-1-1-step1", 1)
    >>> recorder.kill(101.5, "controller", "preparing")
    >>> [(s["label"], s["t0"], s["t1"]) for s in recorder.spans]
    [('preparing', 1.0, 1.5)]
    >>> recorder.marks[0]["kind"], recorder.marks[0]["t"]
    ('kill', 1.5)
    """

    def __init__(self, origin: float = 0.0) -> None:
        super().__init__()
        self.origin = origin
        self._t = 0.0
        self._lane_list: list[dict[str, str]] = []
        self.title = "quiesce chaos"
        self.clock = CHAOS_CLOCK
        self.unmeasured = dict(CHAOS_UNMEASURED)

    def _now(self) -> float:
        return self._t

    def _at(self, t: float) -> None:
        self._t = t - self.origin
        self._end = max(self._end, self._t)

    def set_lanes(self, lanes: list[tuple[str, str]]) -> None:
        """The timeline's lanes, in order: `(name, role)`, the controller's first."""
        self._lane_list = [{"name": name, "role": role} for name, role in lanes]

    def _lanes(self) -> list[dict[str, str]]:
        return list(self._lane_list)

    # ------------------------------------------------------------------ the controller

    def phase(self, t: float, name: str, checkpoint_id: str | None, step: int | None) -> None:
        """The controller entered checkpoint phase `name` (`idle`: no attempt runs)."""
        self._at(t)
        if checkpoint_id is not None and step is not None:
            self._op = checkpoint_id
            self._attempts.setdefault(checkpoint_id, _Attempt(step))
        if name == "idle":
            self._end_span(CONTROLLER, "phase")
        else:
            self._begin(CONTROLLER, "phase", "phase", name, checkpoint_id=checkpoint_id)

    def admission(self, t: float, closed: bool, by: list[str]) -> None:
        """The controller's admission gate closed (held `by` these) or opened again."""
        self._at(t)
        if closed:
            self._begin(CONTROLLER, "admission", "admission", "admission closed", by=by)
        else:
            self._end_span(CONTROLLER, "admission")

    def outcome(self, t: float, *, result: str, checkpoint_id: str, step: int, reason: str) -> None:
        """A checkpoint attempt ended (`completed`, `skipped` or `failed`, and why)."""
        self._at(t)
        attempt = self._attempts.setdefault(checkpoint_id, _Attempt(step))
        attempt.outcome, attempt.reason = result, reason
        self._mark(CONTROLLER, "outcome", result, checkpoint_id=checkpoint_id, reason=reason)

    def metric(self, name: str, value: float, checkpoint_id: str | None) -> None:
        """A `checkpoint.total_seconds` or `checkpoint.admission_closed_s` of an attempt."""
        attempt = None if checkpoint_id is None else self._attempts.get(checkpoint_id)
        if attempt is None:
            return
        if name == "checkpoint.total_seconds":
            attempt.seconds += value
        elif name == "checkpoint.admission_closed_s":
            attempt.admission_s += value

    def step(self, t: float, step: int) -> None:
        """The trainer committed optimizer step `step`."""
        self._at(t)
        previous = self._steps.get(step)
        self._steps[step] = _Step(step, self._t, reruns=0 if previous is None else 1)

    def restore_started(self, t: float) -> None:
        """A controller process started: its restore begins."""
        self._at(t)
        self._begin(CONTROLLER, "restore", "restore", "restoring")

    def restored(self, t: float, result: str, **tip: Any) -> None:
        """The controller's restore ended with `result` (`snapshot`, `fresh_start`, ...)."""
        self._at(t)
        if not self._steps:
            self._training_began = self._t  # the deployment's start-up is no step's time
        opened = self._open.get((CONTROLLER, "restore"))
        if opened is not None:
            opened.label = result
        self._end_span(CONTROLLER, "restore", result=result, **tip)

    # ------------------------------------------------------------------ the parent

    def kill(self, t: float, victim: str, phase: str) -> None:
        """The chaos parent SIGKILLed `victim` while the controller was in `phase`. A killed
        controller's phase, admission window and restore end there; a participant's fence
        is durable (its state directory), so its fence span goes on."""
        self._at(t)
        if victim == CONTROLLER:
            for lane, slot in [key for key in self._open if key[0] == CONTROLLER]:
                self._end_span(lane, slot, cut_by="SIGKILL")
        self._mark(victim, "kill", "SIGKILL", victim=victim, controller_phase=phase)

    def restarted(self, t: float, victim: str, started_at: float) -> None:
        """`victim`, started again at `started_at` on the same state, is up at `t`."""
        self._at(t)
        self._mark(
            victim,
            "restart",
            "restart",
            started_s=round(started_at - self.origin, 6),
            up_after_s=round(t - started_at, 6),
            restarted_on=(
                "the snapshot store and the intent journal"
                if victim == CONTROLLER
                else "its state directory (journal)"
            ),
        )

    # ------------------------------------------------------------------ the end

    def record(self, line: FenceLogLine) -> None:
        """A participant's fence-log line (read back from its file, at its own `time`)."""
        self._at(line.time)
        super().record(line)

    def finish_chaos(self, t: float, summary: dict[str, Any], items: dict[int, int]) -> None:
        """The run ended at `t` with `summary` (the `ChaosResult` as JSON); `items` is the
        number of items each step trained (from `trained.log`)."""
        for number, count in items.items():
            if number in self._steps:
                self._steps[number].items = count
        self._at(t)
        self.finish(summary)

    def _headline(self) -> list[tuple[str, Any]]:
        s = self._summary or {}
        phases = ", ".join(f"{k} {v}" for k, v in (s.get("kills_by_phase") or {}).items())
        return [
            ("verdict", "ok" if s.get("ok") else "VIOLATED"),
            (
                "kills (controller / participant)",
                f"{s.get('kills')} ({s.get('controller_kills')} / {s.get('participant_kills')})",
            ),
            ("kills by phase", phases or "-"),
            ("recoveries", s.get("recoveries")),
            ("steps", s.get("steps")),
            ("checkpoints completed", s.get("checkpoints_completed")),
            ("lost / duplicated", f"{s.get('lost')} / {s.get('duplicated')}"),
            ("corrupt snapshots selected", s.get("corrupt_selected")),
            ("wall seconds", s.get("wall_s")),
        ]
