"""`quiesce chaos` end to end: real processes, real SIGKILLs, an independent ledger.

Every child of a chaos run has the run's directory on its command line, so "no child
survives" is checked by scanning /proc for it, independently of the chaos parent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quiesce.adapters import FinishedGroup
from quiesce.harness._chaos import ChaosConfig, run_chaos
from quiesce.harness._chaos_controller import (
    DurableTrainer,
    LoggedDataPlane,
    read_consumed,
    read_trained,
)

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
    assert proc.returncode == 130, err
    assert processes_naming(workdir) == []


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
