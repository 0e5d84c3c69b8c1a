"""`quiesce chaos` end to end: real processes, real SIGKILLs, an independent ledger.

Every child of a chaos run has the run's directory on its command line, so "no child
survives" is checked by scanning /proc for it, independently of the chaos parent.

The interrupt tests drive `_Children` in this process and send SIGINT at every trace event
of a spawn (or of the cleanup), one run per event, then check that no child is left alive:
issue 15 was a SIGINT between the fork in `Popen` and the child's record in `started`,
which left a child nobody stopped.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from quiesce.adapters import FinishedGroup
from quiesce.harness._chaos import (
    ChaosConfig,
    ChaosInterrupted,
    _Child,
    _Children,
    _interruptible,
    run_chaos,
)
from quiesce.harness._chaos_controller import (
    DurableTrainer,
    LoggedDataPlane,
    read_consumed,
    read_trained,
)
from quiesce.models import read_fence_logs, validate_fence_log

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/cmdline").exists(), reason="needs /proc to find leftover children"
)

REQUIRED = {
    "kills",
    "controller_kills",
    "participant_kills",
    "recoveries",
    "checkpoints_completed",
    "lost",
    "duplicated",
    "corrupt_selected",
    "ok",
}


def processes_naming(path: Path) -> list[int]:
    """Pids of live (non-zombie) processes whose command line mentions `path`."""
    needle = str(path).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def chaos_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "quiesce", "chaos", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_three_kills_keep_every_promise(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    proc = chaos_cli("--kills", "3", "--seed", "3", "--workdir", str(workdir), "--json")
    out, err = proc.communicate(timeout=240)
    result = json.loads(out)
    assert set(result) >= REQUIRED, result
    assert result["violations"] == [], err
    assert (result["ok"], proc.returncode) == (True, 0)
    assert (result["lost"], result["duplicated"], result["corrupt_selected"]) == (0, 0, 0)
    assert result["kills"] == 3
    assert result["controller_kills"] + result["participant_kills"] == 3
    assert result["recoveries"] == 3
    assert result["checkpoints_completed"] >= 1
    assert err.count("(SIGKILL)") == 3
    # The ledger the verdict came from is on disk: every prompt of the run trained once.
    trained = [item for batch in read_trained(workdir) for item in batch.items]
    budget = ChaosConfig(kills=3).total_steps() * 2  # steps x groups per step
    assert len(trained) == len(set(trained)) == budget * 2  # x group size
    assert set(read_consumed(workdir)) == {prompt for prompt, _ in trained}
    assert processes_naming(workdir) == []
    # Refinement of the real run: every participant's fence log (appended to across its
    # restarts) maps onto the design; a killed participant comes back a new incarnation.
    logs = sorted((workdir / "logs").glob("*.fence.jsonl"))
    verdict = validate_fence_log(read_fence_logs(logs))
    assert len(logs) == verdict.participants == 4 and verdict.ok, verdict.describe()
    assert verdict.restarts <= result["participant_kills"] and verdict.moves > 0


def test_sigint_stops_every_child(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    proc = chaos_cli("--kills", "50", "--workdir", str(workdir))
    deadline = time.monotonic() + 60
    # Wait until the whole deployment runs: four participants and the controller.
    while len(processes_naming(workdir)) < 5:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the deployment never came up"
        time.sleep(0.1)
    children = processes_naming(workdir)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted by SIGINT" in err
    assert processes_naming(workdir) == []
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
@pytest.mark.parametrize("run", range(50))
def test_sigint_as_a_child_is_spawned_stops_every_child(tmp_path: Path, run: int) -> None:
    """`test_sigint_stops_every_child`, aimed at the spawns: SIGINT as soon as the n-th
    process naming the run shows up (the parent, then each participant as it forks, still
    with the parent's command line until it execs), so it lands while that `Popen` runs.
    (The controller is started by the same `_Children.start`, 5 s later: not worth the wait.)
    """
    workdir = tmp_path / "run"
    processes = 2 + run % 4  # the parent, then participants 1 to 4
    proc = chaos_cli("--kills", "50", "--workdir", str(workdir))
    deadline = time.monotonic() + 60
    while len(processes_naming(workdir)) < processes:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the deployment never came up"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert processes_naming(workdir) == []


def test_sigterm_stops_every_child(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    proc = chaos_cli("--kills", "50", "--workdir", str(workdir))
    deadline = time.monotonic() + 60
    while not (workdir / "controller.json").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the deployment never came up"
        time.sleep(0.1)
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err  # 128 + SIGTERM, as a shell reports it
    assert processes_naming(workdir) == []


# A child to spawn a thousand times: exec'ing `sleep` costs a third of exec'ing Python.
SLEEPER = (
    [sleep, "60"]
    if (sleep := shutil.which("sleep"))
    else [sys.executable, "-c", "import time; time.sleep(60)"]
)


def live_children() -> set[int]:
    """Pids of this process's live (non-zombie) children, from /proc: also one forked but
    not exec'd yet, and one no `Popen` object was kept of."""
    me = os.getpid()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                state, ppid = stat.read().rsplit(b")", 1)[1].split()[:2]
        except OSError:
            continue
        if int(ppid) == me and state != b"Z":
            found.add(int(name))
    return found


def sigint_at(
    event: int,
    call: Callable[[], object],
    *,
    from_interrupt: bool = False,
    after_return_of: str | None = None,
    only: tuple[str, ...] = ("call", "line", "return", "exception"),
) -> tuple[bool, bool]:
    """Call `call()`, sending this process SIGINT at its `event`-th trace event: each call,
    line, return and exception event of every frame under it (`Popen` and its helpers too),
    counted from its start or, with `from_interrupt`, from the first `ChaosInterrupted`, or,
    with `after_return_of`, from the return of the function of that name; `only` names the
    kinds of event counted.

    The handler runs inside `signal.raise_signal`, so whatever it raises comes out at that
    point of the traced code, just as from a signal between two bytecodes. Returns whether
    the signal was sent (False: fewer events) and whether `call` raised `ChaosInterrupted`.

    The garbage collector is off meanwhile: it would run finalizers of earlier garbage at
    points that change from run to run, and an exception raised in a finalizer is dropped.
    """
    seen = 0
    counting = not from_interrupt and after_return_of is None
    sent = False

    def tracer(frame: FrameType, what: str, arg: Any) -> Any:
        nonlocal seen, counting, sent
        if what == "exception" and arg[0] is ChaosInterrupted and from_interrupt:
            counting = True
        if what == "return" and frame.f_code.co_name == after_return_of:
            counting = True
            return tracer
        if counting and not sent and what in only:
            if seen == event:
                sent = True
                signal.raise_signal(signal.SIGINT)
            seen += 1
        return tracer

    previous, collecting = sys.gettrace(), gc.isenabled()
    gc.disable()
    sys.settrace(tracer)
    try:
        call()
    except ChaosInterrupted:
        return sent, True
    finally:
        sys.settrace(previous)
        if collecting:
            gc.enable()
    return sent, False


def stop_leftovers(before: set[int]) -> None:
    """SIGKILL and reap the children a failed test left, so they do not sleep on."""
    for pid in live_children() - before:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_sigint_anywhere_in_a_start_leaves_no_child_unrecorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned: list[subprocess.Popen[bytes]] = []

    class Recorded(subprocess.Popen[bytes]):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            spawned.append(self)  # before the fork: kept even when `Popen` raises after it
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    before = live_children()
    event = 0
    try:
        while True:
            spawned.clear()
            children = _Children(dict(os.environ))
            child = _Child("sleeper", SLEEPER, tmp_path / "sleeper.log")
            with _interruptible():
                sent, interrupted = sigint_at(event, functools.partial(children.start, child))
                forked = [proc for proc in spawned if getattr(proc, "pid", None) is not None]
                recorded = {proc.pid for proc in children.started}
                unrecorded = {proc.pid for proc in forked} - recorded
                children.stop_all()
            where = f"SIGINT at trace event {event} of a start"
            assert not unrecorded, f"{where}: pids {unrecorded} were spawned, never recorded"
            assert all(proc.poll() is not None for proc in forked), f"{where}: a child lives"
            assert interrupted == sent, f"{where}: the signal was lost"
            if not sent:
                break
            event += 1
        # Also no child `Recorded` missed (all the sleepers would still be sleeping).
        assert live_children() == before
    finally:
        stop_leftovers(before)
    assert event > 100  # the sweep went through all of `Popen`, not just `start`


def test_a_second_sigint_cannot_cut_the_cleanup_short(tmp_path: Path) -> None:
    before = live_children()
    event = 0
    try:
        while True:
            children = _Children(dict(os.environ))
            for number in range(2):
                children.start(_Child(f"sleeper-{number}", SLEEPER, tmp_path / "sleeper.log"))

            def interrupted_run(children: _Children = children) -> None:
                try:  # `run_chaos`: the run, interrupted, then the `finally` that stops all
                    signal.raise_signal(signal.SIGINT)
                finally:
                    children.stop_all(grace_s=1.0)

            with _interruptible():
                sent, interrupted = sigint_at(event, interrupted_run, from_interrupt=True)
            assert interrupted
            assert all(proc.poll() is not None for proc in children.started), (
                f"a second SIGINT at trace event {event} after the first: a child outlived "
                f"the cleanup"
            )
            if not sent:
                break
            event += 1
        assert live_children() == before
    finally:
        stop_leftovers(before)
    assert event > 50  # through the `finally` and all of `stop_all`


def test_a_first_sigint_as_a_finished_run_stops_its_children_still_stops_them(
    tmp_path: Path,
) -> None:
    # The run ended normally; the signal lands anywhere in the cleanup, including before
    # `stop_all`'s own hold begins. CPython runs a signal handler only where it checks for
    # pending work (a function's entry, a backward jump), never between `finally:` and the
    # first call in it: so here the signal lands at every function entry of the cleanup.
    before = live_children()
    event = 0
    try:
        while True:
            children = _Children(dict(os.environ))
            for number in range(2):
                children.start(_Child(f"sleeper-{number}", SLEEPER, tmp_path / "sleeper.log"))

            def run_finished() -> None:
                pass

            def finished_run(children: _Children = children) -> None:
                try:  # `run_chaos`: a run that finished, then the `finally` that stops all
                    run_finished()
                finally:
                    try:
                        children.stop_all(grace_s=1.0)
                    except ChaosInterrupted:
                        children.stop_all(grace_s=1.0)
                        raise

            with _interruptible():
                sent, _ = sigint_at(
                    event, finished_run, after_return_of="run_finished", only=("call",)
                )
            assert all(proc.poll() is not None for proc in children.started), (
                f"a SIGINT at trace event {event} of the cleanup: a child outlived it"
            )
            if not sent:
                break
            event += 1
        assert live_children() == before
    finally:
        stop_leftovers(before)
    assert event > 5  # through all of `stop_all`


def test_durable_trainer_replays_its_log_and_ignores_a_torn_line(tmp_path: Path) -> None:
    trainer = DurableTrainer.open(tmp_path)
    trainer.optimizer_step([FinishedGroup(prompt_id=3, siblings=(0, 1))], dataloader_position=2)
    trainer.optimizer_step([FinishedGroup(prompt_id=2, siblings=(0, 1))], dataloader_position=4)
    with (tmp_path / "trained.log").open("ab") as log:
        log.write(b'{"step": 3, "items": [[4, 0')  # a kill in the middle of a write
    assert [batch.step for batch in read_trained(tmp_path)] == [1, 2]
    again = DurableTrainer.open(tmp_path)
    assert (again.step, again.anchor().dataloader_position) == (2, 4)
    assert again.lineage() == trainer.lineage()
    again.optimizer_step([FinishedGroup(prompt_id=4, siblings=(0,))], dataloader_position=5)
    assert [batch.items for batch in read_trained(tmp_path)][-1] == ((4, 0),)


def test_logged_dataplane_appends_every_prompt_across_restarts(tmp_path: Path) -> None:
    plane = LoggedDataPlane(DurableTrainer.open(tmp_path), tmp_path)
    assert [plane.next_prompt() for _ in range(3)] == [0, 1, 2]
    restarted = LoggedDataPlane(DurableTrainer.open(tmp_path), tmp_path)
    restarted.next_prompt()
    assert read_consumed(tmp_path) == [0, 1, 2, 0]


def test_chaos_config_defaults_leave_room_for_every_kill() -> None:
    assert ChaosConfig(kills=0).total_steps() == 6
    assert ChaosConfig(kills=10).total_steps() == 34
    assert ChaosConfig(kills=10, steps=5).total_steps() == 5


@pytest.mark.slow
def test_ten_kills_in_process(tmp_path: Path) -> None:
    result = run_chaos(kills=10, seed=10, workdir=tmp_path / "run")
    assert result.violations == []
    assert (result.ok, result.lost, result.duplicated, result.corrupt_selected) == (
        True,
        0,
        0,
        0,
    )
    assert result.kills == result.recoveries == 10
    assert processes_naming(tmp_path / "run") == []
