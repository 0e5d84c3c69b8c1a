"""Recorded kit programs replayed on a participant in this process: the same requests every
time, judged as `check_participant` judges them, stopping at the first broken rule."""

from __future__ import annotations

from quiesce.testing import ReleaseOnRetireHost
from quiesce.testing._machine import ENDINGS
from quiesce.testing._program import Program
from quiesce.testing._replay import record_programs, replay_programs
from tests.testing.test_in_process import HostParticipant


def _restart(old: object) -> HostParticipant:
    assert isinstance(old, HostParticipant)
    return old.recovered()


def _lifecycle(ending: str) -> tuple[str, dict[str, object]]:
    arguments = {"kind": "execution_lifecycle", "turns": 2, "pick": 0, "intact": True}
    return ("scenario", {**arguments, "variant": ENDINGS.index(ending)})


def test_recorded_programs_replay_on_the_reference_participant() -> None:
    programs = record_programs(
        lambda: HostParticipant("agent"), "agent", examples=4, seed=3, restart=_restart
    )
    assert len(programs) >= 4 and all(programs)  # one per example, each with rule calls
    replayed = replay_programs(
        lambda: HostParticipant("agent"), "agent", programs, restart=_restart
    )
    assert replayed.violation is None and replayed.program is None
    assert replayed.programs == len(programs) and replayed.requests > 10 * len(programs)


def test_a_replay_stops_at_the_first_program_that_breaks_a_rule() -> None:
    # S17: a host that releases a completed result on retire. The first program passes
    # (an execution ACKed twice), the second breaks the rule (retired, then ACKed), the
    # third is never run.
    programs: tuple[Program, ...] = (
        (_lifecycle("ack_twice"),),
        (_lifecycle("retire_then_ack"),),
        (_lifecycle("ack_twice"),),
    )
    replayed = replay_programs(
        lambda: HostParticipant("agent", ReleaseOnRetireHost), "agent", programs
    )
    assert replayed.violation is not None and replayed.program == 1
    assert replayed.programs == 2
    assert replayed.violation.rule_id == "retire_completed", replayed.violation
