"""`quiesce chaos`: kill -9 a real deployment at random moments and check it kept its promises.

What lives here: the chaos *parent*. It starts a deployment on 127.0.0.1 -- one `quiesce
serve` process per participant (HTTP, a shared token file, a `--state-dir` journal each,
PROTOCOL.md §6) and one controller process (`_chaos_controller.py`: the simulated training
run over HTTP, with the filesystem snapshot store and the intent journal) -- every child
started with the running interpreter in its own process group. While the run trains, it
SIGKILLs the controller or a participant, seeded, at a moment picked by the phase the
controller announces (preparing, committing, capturing, publishing, releasing, or any
moment), starts the victim again on the same state and lets recovery run. What it does not
know: the protocol. It judges the run only by what is on disk and on the wire.

The checks, all independent of the controller's own view:
- the ledger (`trained.log`, fsynced by the trainer at each committed step, and
  `consumed.log`, the dataloader's consumption): `lost` counts `(prompt, sibling)` items
  that were consumed (or belong to the run's data) and never trained, `duplicated` items
  trained more than once (PROTOCOL.md §8; every step is a trainer checkpoint, so the
  lineage is never rolled back);
- after each controller kill (the store is quiet then) and at the end, every published
  snapshot passes `SnapshotStore.verify`; the snapshot a restarted controller restores must
  be one of those that verified after the kill (`corrupt_selected` counts the others: a
  half-written staging directory or an unverifiable snapshot);
- after each kill the run made progress: a step was trained, a snapshot was published, or
  the run finished (`recoveries` counts the kills followed by progress);
- at the end the controller finished its data (not stopped), its intent record is clear,
  every participant's fence is `idle` and no agent holds a completed result nobody ACKed
  (a leaked completion keeps that agent from ever being ready for a prepare again);
- refinement: every participant's fence log (`serve --fence-log`, appended to across its
  restarts) maps onto the design model step by step (docs/validate.md).

Every child is stopped on the way out, also on SIGINT/SIGTERM (`ChaosInterrupted`): SIGTERM
to its process group, then SIGKILL.

>>> ChaosConfig(kills=3).total_steps()
13
"""

from __future__ import annotations

import functools
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from quiesce.adapters import ControllerJournal, CorruptIntent, SnapshotStore, SnapshotStoreError
from quiesce.fsm import QuiesceError
from quiesce.harness._chaos_controller import ChaosControllerConfig, read_consumed, read_trained
from quiesce.harness._recorder import ChaosRecorder
from quiesce.models import MalformedFenceLog, read_fence_logs, validate_fence_log
from quiesce.protocol.wire import Role

__all__ = [
    "KILL_TARGETS",
    "ChaosConfig",
    "ChaosError",
    "ChaosInterrupted",
    "ChaosResult",
    "run_chaos",
]

KILL_TARGETS = ("preparing", "committing", "capturing", "publishing", "releasing", "any")
"""When a kill strikes: as the controller enters that checkpoint phase, or at any moment."""

CONTROLLER = "controller"
_POLL_S = 0.02


class ChaosError(QuiesceError):
    """The chaos run could not be set up or driven (a child never started, a timeout)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class ChaosInterrupted(QuiesceError):
    """SIGINT or SIGTERM arrived: every child was stopped; `signum` says which."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}; every child was stopped")


class ChaosConfig(BaseModel):
    """Every knob of `quiesce chaos`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kills: int = Field(default=10, ge=0)
    seed: int = 0
    steps: int | None = Field(default=None, ge=1)
    """Training steps of the run (default: enough for every kill, `total_steps()`)."""
    groups_per_step: int = Field(default=2, ge=1)
    group_size: int = Field(default=2, ge=1)
    agents: int = Field(default=2, ge=1)
    max_turns: int = Field(default=3, ge=1)
    workdir: Path | None = None
    """Keep the run's files here (default: a temporary directory, removed when ok)."""
    progress_timeout_s: float = Field(default=60.0, gt=0)
    """How long the run may go without progress (a step, a snapshot) before it fails."""
    phase_timeout_s: float = Field(default=10.0, gt=0)
    """How long a kill waits for its target phase before it strikes anyway."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Log level of the children (their logs go to `<workdir>/logs/`)."""

    def total_steps(self) -> int:
        """`steps`, or about three steps per kill: a kill waits for progress, then for
        its phase, which takes a step or two."""
        return self.steps if self.steps is not None else max(6, 3 * self.kills + 4)


class ChaosResult(BaseModel):
    """The JSON of `quiesce chaos --json`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kills: int
    controller_kills: int
    participant_kills: int
    recoveries: int
    checkpoints_completed: int
    lost: int
    duplicated: int
    corrupt_selected: int
    ok: bool
    seed: int
    steps: int
    kills_by_phase: dict[str, int]
    """The controller phase each kill struck in (as last announced before the kill)."""
    violations: list[str]
    wall_s: float
    workdir: str | None
    """Where the run's files and logs are (kept when the run was not ok)."""


# --------------------------------------------------------------------------- children


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(eq=False)
class _Child:
    """One child role (a participant or the controller) and its current process."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    generation: int = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    # Every child leads its own session, so its process group id is its pid.
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


@dataclass
class _Children:
    """Every process this run started, so all of them are stopped on the way out."""

    env: dict[str, str]
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, child: _Child, *, stdout: int | None = None) -> subprocess.Popen[bytes]:
        # Spawning and recording are one step as far as SIGINT/SIGTERM go: a `ChaosInterrupted`
        # raised in between -- inside `Popen` after the fork (its wait for the exec), or after
        # `Popen` returned but before the append -- would leave a child nobody stops.
        with _held_signals():
            with child.log.open("ab") as log:
                proc = subprocess.Popen(
                    child.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout if stdout is not None else subprocess.DEVNULL,
                    stderr=log,
                    env=self.env,
                    start_new_session=True,
                )
            self.started.append(proc)
            child.proc = proc
            child.generation += 1
        return proc

    @staticmethod
    def kill(child: _Child) -> None:
        """SIGKILL the child's process group and reap it."""
        # Nothing to hold here: the process is in `started` already, so an interrupt between
        # the SIGKILL and the wait leaves it to `stop_all`.
        if child.proc is None:
            return
        _signal_group(child.proc, signal.SIGKILL)
        child.proc.wait()

    def stop_all(self, grace_s: float = 5.0) -> None:
        """SIGTERM every live child's group, then SIGKILL what is left after `grace_s`."""
        # A signal here (a second Ctrl-C during the grace period, or a first one as a finished
        # run stops its children) must not cut the loop short: it is held to the end. One that
        # lands before the hold begins is caught by `run_chaos`, which stops them again.
        with _held_signals():
            live = [proc for proc in self.started if proc.poll() is None]
            for proc in live:
                _signal_group(proc, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            for proc in live:
                with suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            for proc in self.started:
                # Also groups whose leader is gone: nothing of this run may outlive it.
                _signal_group(proc, signal.SIGKILL)
                if proc.poll() is None:
                    proc.wait()


class _Signals(threading.local):
    """Per thread: Python runs signal handlers in the main thread only, so the handler reads
    the main thread's copy, and `_Children` used in another thread cannot hold its signals."""

    held = 0
    """Depth of `_held_signals` sections: the handler only records the signal meanwhile."""
    pending: int | None = None


_signals = _Signals()


def _interrupt_under_way() -> bool:
    # A `ChaosInterrupted` is being handled: a `finally` or `__exit__` on its way out to the
    # `finally` that stops the children runs. A second signal must not replace it there, nor
    # cut that cleanup short. (Not a flag set when raising: an exception raised inside a
    # finalizer, such as a generator closed by the garbage collector, is dropped, and the
    # next Ctrl-C must still work.)
    return isinstance(sys.exc_info()[1], ChaosInterrupted)


@contextmanager
def _held_signals() -> Iterator[None]:
    """No `ChaosInterrupted` fires inside; a signal that arrived meanwhile is raised on the
    normal way out (after an exception, at the next section's end, e.g. `stop_all`'s), or
    dropped if an interrupt is under way already.

    Not `signal.pthread_sigmask`: it blocks a signal for the calling thread only, the kernel
    hands a process-directed SIGINT to any thread not blocking it (the controller's event
    reader), and Python runs the handler in the main thread all the same."""
    # The handler may run between any two bytecodes here too: before `held` is stored it
    # raises with nothing done yet; after the decrement it raises with everything done.
    _signals.held += 1
    try:
        yield
    finally:
        _signals.held -= 1
    if not _signals.held and _signals.pending is not None:
        signum, _signals.pending = _signals.pending, None
        if not _interrupt_under_way():
            raise ChaosInterrupted(signum)


@contextmanager
def _interruptible() -> Iterator[None]:
    """Turn SIGINT/SIGTERM into `ChaosInterrupted` (main thread only), so `finally`
    blocks stop the children before the process goes; never inside a `_held_signals`
    section, and not while one is handled already."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if _interrupt_under_way():
            return
        if _signals.held:
            if _signals.pending is None:
                _signals.pending = signum
            return
        raise ChaosInterrupted(signum)

    _signals.pending = None
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# --------------------------------------------------------------------------- the run


@dataclass
class _Kill:
    victim: str
    target: str
    phase: str
    progress_mark: tuple[int, frozenset[str]]
    recovered: bool = False


class _Chaos:
    """One chaos run (see the module docstring)."""

    def __init__(
        self,
        config: ChaosConfig,
        root: Path,
        say: Callable[[str], None],
        recorder: ChaosRecorder | None = None,
    ) -> None:
        self.cfg = config
        self.recorder = recorder
        self.root = root
        self.say = say
        self.rng = random.Random(config.seed)
        self.steps = config.total_steps()
        self.budget = self.steps * config.groups_per_step
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.token = f"chaos-{random.SystemRandom().getrandbits(128):032x}"
        self.token_file = root / "token"
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self.token + "\n")
        env = dict(os.environ)
        env.pop("QUIESCE_TOKEN", None)
        env["QUIESCE_LOG_LEVEL"] = config.log_level
        self.children = _Children(env)
        self.participants: dict[str, _Child] = {}
        self.urls: dict[str, str] = {}
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.controller: _Child | None = None
        self.controller_spawned_at = 0.0
        self.phase = "idle"
        self.phase_seen: list[str] = []
        self.done: dict[str, Any] | None = None
        self.restored: dict[str, Any] | None = None
        self.controller_exited = False
        self.checkpoints_completed = 0
        self.kills: list[_Kill] = []
        self.corrupt_selected = 0
        self.violations: list[str] = []

    # ------------------------------------------------------------------ set-up

    def _participant_argv(self, name: str, role: Role, port: int) -> list[str]:
        argv = [sys.executable, "-m", "quiesce", "serve", "--role", role, "--port", str(port)]
        argv += ["--state-dir", str(self.root / "participants" / name)]
        argv += ["--token-file", str(self.token_file), "--name", name]
        argv += ["--fence-log", str(self._fence_log(name))]
        argv += ["--log-level", self.cfg.log_level]
        if role is Role.RESOURCES:
            argv += ["--recovery-mode", "export_restore"]
        if role is Role.AGENT:  # executions call the real services, and freeze on a fenced policy
            argv += ["--policy", self.urls["policy-0"], "--resources", self.urls["resources-0"]]
        return argv

    def _fence_log(self, name: str) -> Path:
        return self.logs / f"{name}.fence.jsonl"

    def start_deployment(self) -> None:
        names = [("policy-0", Role.POLICY), ("resources-0", Role.RESOURCES)]
        names += [(f"agent-{i}", Role.AGENT) for i in range(self.cfg.agents)]
        for name, role in names:
            port = free_port()
            self.urls[name] = f"http://127.0.0.1:{port}"
            argv = self._participant_argv(name, role, port)
            self.participants[name] = _Child(name, argv, self.logs / f"{name}.log")
        if self.recorder is not None:
            order = {Role.AGENT: 0, Role.POLICY: 1, Role.RESOURCES: 2}
            ranked = sorted(names, key=lambda item: (order[item[1]], item[0]))
            self.recorder.set_lanes([(CONTROLLER, CONTROLLER), *((n, r.value) for n, r in ranked)])
        for child in self.participants.values():
            self.children.start(child)
        for name in self.participants:
            self._wait_healthy(name)
        config = ChaosControllerConfig(
            root=self.root,
            token_file=self.token_file,
            participants=self.urls,
            agents=tuple(n for n, r in names if r is Role.AGENT),
            resources=tuple(n for n, r in names if r is Role.RESOURCES),
            steps=self.steps,
            groups_per_step=self.cfg.groups_per_step,
            group_size=self.cfg.group_size,
            max_turns=self.cfg.max_turns,
            seed=self.cfg.seed,
        )
        config_path = self.root / "controller.json"
        config_path.write_text(config.model_dump_json(indent=2))
        argv = [sys.executable, "-m", "quiesce.harness._chaos_controller", str(config_path)]
        self.controller = _Child(CONTROLLER, argv, self.logs / "controller.log")
        self._start_controller()

    def _wait_healthy(self, name: str) -> None:
        child = self.participants[name]
        deadline = time.monotonic() + self.cfg.progress_timeout_s
        url = f"{self.urls[name]}/healthz"
        while time.monotonic() < deadline:
            if not child.alive:
                raise ChaosError(f"participant {name} exited at start; see {child.log}")
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise ChaosError(f"participant {name} did not answer /healthz; see {child.log}")

    def _start_controller(self) -> None:
        child = self.controller
        assert child is not None
        self.controller_spawned_at = time.monotonic()
        proc = self.children.start(child, stdout=subprocess.PIPE)
        generation = child.generation
        self.restored = None
        self.phase = "restoring"
        assert proc.stdout is not None
        reader = threading.Thread(
            target=_read_events,
            args=(proc.stdout, generation, self.events),
            name=f"chaos-events-{generation}",
            daemon=True,
        )
        reader.start()

    # ------------------------------------------------------------------ events

    def _pump(self, timeout: float) -> None:
        """Take the controller's events for up to `timeout` seconds (at least one poll)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                event = self.events.get(timeout=max(0.0, min(left, _POLL_S)))
            except queue.Empty:
                if left <= 0:
                    return
                continue
            self._take(event)
            if time.monotonic() >= deadline:
                return

    def _take(self, event: dict[str, Any]) -> None:
        assert self.controller is not None
        if event.get("_generation") != self.controller.generation:
            return  # from a controller already killed
        kind = event.get("event")
        if self.recorder is not None:
            self._record(event)
        if kind == "phase":
            self.phase = str(event["phase"])
            self.phase_seen.append(self.phase)
        elif kind == "outcome" and event.get("result") == "completed":
            self.checkpoints_completed += 1
        elif kind == "restored":
            self.restored = event
            self.phase = "idle"
        elif kind == "done":
            self.done = event
        elif kind == "exit":
            self.controller_exited = True

    def _record(self, event: dict[str, Any]) -> None:
        """Hand one controller event to the run report, at the controller's own time."""
        recorder = self.recorder
        assert recorder is not None and self.controller is not None
        kind = event.get("event")
        t = float(event.get("t", event["_arrived"]))
        if kind == "started":
            if self.controller.generation > 1:
                recorder.restarted(t, CONTROLLER, self.controller_spawned_at)
            recorder.restore_started(t)
        elif kind == "restored":
            recorder.restored(
                t,
                str(event.get("kind")),
                snapshot=event.get("snapshot_id"),
                intent=event.get("intent"),
                intent_action=event.get("intent_action"),
                redispatched=event.get("redispatched"),
                released_orphans=event.get("released_orphans"),
                step=event.get("step"),
            )
        elif kind == "phase":
            recorder.phase(t, str(event["phase"]), event.get("checkpoint_id"), event.get("step"))
        elif kind == "admission":
            recorder.admission(t, bool(event.get("closed")), list(event.get("by") or []))
        elif kind == "outcome":
            recorder.outcome(
                t,
                result=str(event["result"]),
                checkpoint_id=str(event["checkpoint_id"]),
                step=int(event.get("step", 0)),
                reason=str(event.get("reason", "")),
            )
        elif kind == "metric":
            recorder.metric(str(event["name"]), float(event["value"]), event.get("checkpoint_id"))
        elif kind == "step":
            recorder.step(t, int(event["step"]))

    def _wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.controller_exited and self.done is None:
                return False
            if time.monotonic() >= deadline:
                return False
            self._check_participants()
            self._pump(_POLL_S)
        return True

    def _check_participants(self) -> None:
        for name, child in self.participants.items():
            if not child.alive:
                raise ChaosError(f"participant {name} exited by itself; see {child.log}")

    # ------------------------------------------------------------------ progress

    def _progress_mark(self) -> tuple[int, frozenset[str]]:
        """(steps in the trained log, names in `published/`): read-only, so it can be
        looked at while the controller writes."""
        steps = len(read_trained(self.root))
        try:
            names = frozenset(os.listdir(self.root / "snapshots" / "published"))
        except FileNotFoundError:
            names = frozenset()
        return steps, names

    def _progressed(self, mark: tuple[int, frozenset[str]]) -> bool:
        if self.done is not None:
            return True
        steps, names = self._progress_mark()
        return steps > mark[0] or bool(names - mark[1])

    def _await_recovery(self) -> bool:
        """Wait for progress after the last kill; mark it recovered."""
        if not self.kills:
            return True
        last = self.kills[-1]
        if last.recovered:
            return True
        if self._wait(lambda: self._progressed(last.progress_mark), self.cfg.progress_timeout_s):
            last.recovered = True
            return True
        self.violations.append(
            f"no progress within {self.cfg.progress_timeout_s:g} s after kill "
            f"{len(self.kills)} ({last.victim} in {last.phase})"
        )
        return False

    # ------------------------------------------------------------------ kills

    def run(self) -> None:
        self.start_deployment()
        if not self._wait(lambda: self.restored is not None, self.cfg.progress_timeout_s):
            raise ChaosError(f"the controller never finished its start; see {self._log_of()}")
        for number in range(1, self.cfg.kills + 1):
            if not self._await_recovery() or self.done is not None or self.controller_exited:
                break
            self._one_kill(number)
        if self._await_recovery():
            self._await_done()
        if self.done is not None and self.done.get("stop_reason") is None:
            self._check_quiet_end()  # while the participants still run
        if self.controller_exited and self.done is None:
            self.violations.append(f"the controller exited unexpectedly; see {self._log_of()}")

    def _await_done(self) -> None:
        """Let the run finish, as long as it keeps making progress."""
        while self.done is None and not self.controller_exited:
            mark = self._progress_mark()
            progressed = functools.partial(self._progressed, mark)
            if not self._wait(progressed, self.cfg.progress_timeout_s):
                if not self.controller_exited:
                    self.violations.append(
                        f"the run stalled: no progress for {self.cfg.progress_timeout_s:g} s"
                    )
                return

    def _log_of(self) -> Path:
        assert self.controller is not None
        return self.controller.log

    def _one_kill(self, number: int) -> None:
        victims = [CONTROLLER, *self.participants]
        victim = CONTROLLER if self.rng.random() < 0.5 else self.rng.choice(victims[1:])
        target = self.rng.choice(KILL_TARGETS)
        delay = self.rng.uniform(0.0, 1.0)
        if target == "any":
            self._wait(lambda: self.done is not None, delay)
        else:
            seen = len(self.phase_seen)
            self._wait(
                lambda: self.done is not None or target in self.phase_seen[seen:],
                self.cfg.phase_timeout_s,
            )
        if self.done is not None or self.controller_exited:
            return
        phase = self.phase
        child = self.controller if victim == CONTROLLER else self.participants[victim]
        assert child is not None
        if self.recorder is not None:
            self.recorder.kill(time.monotonic(), victim, phase)
        self.children.kill(child)
        self.say(f"kill {number}/{self.cfg.kills}: {victim} (SIGKILL) in {phase}")
        if victim == CONTROLLER:
            self._drain_events()
            verified = self._verify_published("after a controller kill")
            mark = self._progress_mark()
            self.kills.append(_Kill(victim, target, phase, mark))
            self.controller_exited = False
            self._start_controller()
            if not self._wait(lambda: self.restored is not None, self.cfg.progress_timeout_s):
                if self.done is None:
                    self.violations.append(
                        f"the controller did not restore after kill {number}; see {self._log_of()}"
                    )
                return
            assert self.restored is not None
            chosen = self.restored.get("snapshot_id")
            if self.restored.get("kind") == "snapshot" and chosen not in verified:
                self.corrupt_selected += 1
                self.violations.append(
                    f"after kill {number} the controller restored {chosen}, which was not a "
                    f"verified published snapshot"
                )
        else:
            mark = self._progress_mark()
            self.kills.append(_Kill(victim, target, phase, mark))
            started_at = time.monotonic()
            self.children.start(child)
            self._wait_healthy(victim)
            if self.recorder is not None:
                self.recorder.restarted(time.monotonic(), victim, started_at)

    def _drain_events(self) -> None:
        while True:
            try:
                self._take(self.events.get_nowait())
            except queue.Empty:
                return

    def _verify_published(self, when: str) -> frozenset[str]:
        """Verify every published snapshot (the controller is not running): the names
        that verified; each one that does not is a violation."""
        store = SnapshotStore(self.root / "snapshots")
        good: set[str] = set()
        for name in store.published():
            try:
                store.verify(name)
            except SnapshotStoreError as error:
                self.violations.append(f"published snapshot {name} does not verify {when}: {error}")
            else:
                good.add(name)
        return frozenset(good)

    # ------------------------------------------------------------------ the verdict

    def final_checks(self) -> tuple[int, int]:
        """Check the end state; returns `(lost, duplicated)`."""
        done = self.done
        if done is not None and done.get("stop_reason") is not None:
            self.violations.append(f"the controller stopped: {done['stop_reason']}")
        for number, kill in enumerate(self.kills, start=1):
            if not kill.recovered:
                self.violations.append(
                    f"kill {number} ({kill.victim}) was never followed by progress"
                )
        if len(self.kills) < self.cfg.kills:
            self.violations.append(
                f"the run ended after {len(self.kills)} of {self.cfg.kills} kills; "
                f"raise --steps (now {self.steps})"
            )
        self._verify_published("at the end")
        self._check_refinement()
        return self._ledger()

    def _check_refinement(self) -> None:
        """Every participant's fence log maps onto the design model, or stutters."""
        try:
            verdict = validate_fence_log(read_fence_logs([self._fence_log(n) for n in self.urls]))
        except MalformedFenceLog as error:
            self.violations.append(f"a participant's fence log is malformed: {error}")
            return
        if verdict.unmapped is not None:
            self.violations.append(f"refinement: {verdict.unmapped.explain()}")

    def record_fences(self) -> None:
        """Hand every participant's fence-log line to the run report (a malformed log is a
        violation already: the lines before it are drawn)."""
        assert self.recorder is not None
        with suppress(MalformedFenceLog, OSError):
            for logged in read_fence_logs([self._fence_log(n) for n in self.urls]):
                self.recorder.record(logged.record)

    def _check_quiet_end(self) -> None:
        try:
            intent = ControllerJournal(self.root / "controller").read_intent()
        except CorruptIntent as error:
            self.violations.append(f"the intent record is corrupt at the end: {error}")
        else:
            if intent is not None:
                self.violations.append(
                    f"the intent record was not cleared at the end (I3): {intent.checkpoint_id}"
                )
        headers = {"Authorization": f"Bearer {self.token}"}
        for name, url in self.urls.items():
            try:
                status = httpx.get(f"{url}/control/v1/status", headers=headers, timeout=5.0)
                body = status.json()
                fence, unacked = body.get("fence"), body.get("completed_unacknowledged", 0)
            except (httpx.HTTPError, ValueError, AttributeError) as error:
                self.violations.append(f"{name} did not answer status at the end: {error}")
                continue
            if fence != "idle":
                self.violations.append(f"{name} is still fenced at the end (I7): {fence}")
            if unacked:
                # Nobody will ever ACK it: every later prepare of this agent is not ready.
                self.violations.append(
                    f"{name} holds {unacked} completed result(s) nobody ACKed at the end "
                    f"(a leaked completion; see its journal in {self.root / 'participants'})"
                )

    def _ledger(self) -> tuple[int, int]:
        trained = read_trained(self.root)
        counts = Counter(item for batch in trained for item in batch.items)
        duplicated = sum(n - 1 for n in counts.values() if n > 1)
        prompts = set(read_consumed(self.root))
        if self.done is not None and self.done.get("stop_reason") is None:
            prompts |= set(range(self.budget))  # a finished run trained all of its data
        size = self.cfg.group_size
        lost = sum(1 for p in prompts for s in range(size) if (p, s) not in counts)
        if duplicated:
            self.violations.append(f"duplicated: {duplicated} items trained more than once")
        if lost:
            self.violations.append(f"lost: {lost} consumed items never trained")
        return lost, duplicated


def _read_events(stream: IO[bytes], generation: int, sink: queue.Queue[dict[str, Any]]) -> None:
    """The controller's stdout, one JSON event per line, tagged with its generation; the
    stream is closed at its end (the controller's exit)."""
    with stream:
        for raw in stream:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if isinstance(event, dict):
                event["_generation"] = generation
                event["_arrived"] = time.monotonic()
                sink.put(event)
    sink.put({"event": "exit", "_generation": generation, "_arrived": time.monotonic()})


def run_chaos(
    config: ChaosConfig | None = None,
    *,
    say: Callable[[str], None] | None = None,
    recorder: ChaosRecorder | None = None,
    **overrides: Any,
) -> ChaosResult:
    """Run one chaos experiment to the end and judge it (blocking; call from the main
    thread to have SIGINT/SIGTERM stop the children too).

    `say(line)` gets one line per kill (default: nothing). `recorder` (a `ChaosRecorder`)
    gets the run's timeline: the controller's events, the kills and restarts, and at the end
    every participant's fence log and the result, for `render_report` (its seconds count from
    this call). Every child's command line names
    the run's directory (`ChaosResult.workdir`, when kept), so leftovers are easy to find.
    Raises
    `ChaosInterrupted` on SIGINT/SIGTERM and `ChaosError` when the deployment cannot be
    started; in every case no child outlives the call.
    """
    cfg = config or ChaosConfig(**overrides)
    if config is not None and overrides:
        cfg = config.model_copy(update=overrides)
    keep = cfg.workdir is not None
    root = cfg.workdir or Path(tempfile.mkdtemp(prefix="quiesce-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    begun = time.monotonic()
    if recorder is not None:
        recorder.origin = begun  # the report's seconds count from here
    chaos = _Chaos(cfg, root, say or (lambda _line: None), recorder)
    ok = False
    try:
        with _interruptible():
            try:
                chaos.run()
            finally:
                # Inline, not a helper: a signal lands at a call, so the first one this
                # `finally` can meet is inside `stop_all`, under the `try`.
                try:
                    chaos.children.stop_all()
                except ChaosInterrupted:
                    # It landed before `stop_all`'s hold began, so nothing was stopped.
                    # While this interrupt is handled every further signal is dropped
                    # (`_interrupt_under_way`): this call cannot be cut short.
                    chaos.children.stop_all()
                    raise
        lost, duplicated = chaos.final_checks()
        ok = not chaos.violations
        controller_kills = sum(1 for k in chaos.kills if k.victim == CONTROLLER)
        result = ChaosResult(
            kills=len(chaos.kills),
            controller_kills=controller_kills,
            participant_kills=len(chaos.kills) - controller_kills,
            recoveries=sum(1 for k in chaos.kills if k.recovered),
            checkpoints_completed=chaos.checkpoints_completed,
            lost=lost,
            duplicated=duplicated,
            corrupt_selected=chaos.corrupt_selected,
            ok=ok,
            seed=cfg.seed,
            steps=len(read_trained(root)),
            kills_by_phase=dict(sorted(Counter(k.phase for k in chaos.kills).items())),
            violations=chaos.violations,
            wall_s=round(time.monotonic() - begun, 3),
            workdir=None if (ok and not keep) else str(root),
        )
        if recorder is not None:
            chaos.record_fences()
            items = {batch.step: len(batch.items) for batch in read_trained(root)}
            recorder.finish_chaos(time.monotonic(), result.model_dump(mode="json"), items)
        return result
    finally:
        if not keep and ok:
            shutil.rmtree(root, ignore_errors=True)
