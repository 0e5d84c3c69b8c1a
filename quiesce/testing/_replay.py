"""The conformance kit without its search: fixed, recorded programs replayed on a participant
in this process, every reply judged as `check_participant` judges it.

What lives here: `record_programs` (the programs of a seeded hypothesis search of the kit,
one per example: each a tuple of the rule calls the example made, `_program.Program`) and
`replay_programs` (those programs replayed on fresh participants, in order, up to the first
that breaks a rule). What it does not know: which programs are worth keeping (a caller
records once and keeps the ones it needs), or what a rule says (`_judge`, `_machine`).

Why: a search draws new sequences on every run and shrinks what fails, which is what a
user checking a server wants; a caller checking many variants of one participant against
the same sequences (`quiesce mutants`' participant stage) wants the same requests every
time, and the first failure as it is found. The judge is the kit's own: each reply is
compared with the reference participant's (`quiesce.protocol.handle` on the protocol's own
tables, `_coverage.kit_rules`), whatever tables the participant under test runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.stateful import get_state_machine_test

from quiesce.adapters import Participant
from quiesce.protocol.wire import Role
from quiesce.testing._machine import ConformanceMachine
from quiesce.testing._program import Program, replay
from quiesce.testing._results import ConformanceViolation
from quiesce.testing._session import InProcessRestart, KitRun, participant_restart_hook

__all__ = ["Replayed", "record_programs", "replay_programs"]


@dataclass(frozen=True)
class Replayed:
    """What `replay_programs` found: the first `violation` (None: every program passed),
    the index of the program that broke it, how many programs ran and how many requests
    they sent."""

    violation: ConformanceViolation | None
    program: int | None
    programs: int
    requests: int


def _machine(
    participant: Callable[[], Participant],
    role: Role | str,
    restart: InProcessRestart | None,
    timeout: float,
) -> tuple[KitRun, type[ConformanceMachine]]:
    """A run over fresh participants from `participant` (one per example), and its machine."""
    known = Role(role)
    run = KitRun(
        lambda: nullcontext(participant()),
        "",
        known,
        known is Role.AGENT,
        timeout,
        over_http=False,
    )
    run.nonce = "kit"  # a fresh participant per example: no earlier execution to avoid
    if restart is not None:
        run.restart = participant_restart_hook(run, restart)
    return run, type("ConformanceMachine", (ConformanceMachine,), {"run": run})


def replay_programs(
    participant: Callable[[], Participant],
    role: Role | str,
    programs: Iterable[Program],
    *,
    restart: InProcessRestart | None = None,
    timeout: float = 10.0,
) -> Replayed:
    """Replay each of `programs` on a fresh participant from the factory `participant`
    (an agent's executions driven by the kit), judging every reply against the reference
    participant; stop at the first program that breaks a rule. `restart` is
    `check_participant`'s (needed by programs that restart the participant). A program
    whose rule cannot be called where it stands (a precondition fails) ends there, passed.
    """
    run, machine = _machine(participant, role, restart, timeout)
    violation, at, ran = None, None, 0
    try:
        for index, program in enumerate(programs):
            ran += 1
            found = replay(machine, program)
            if found is not None:
                violation, at = found[0], index
                break
    finally:
        run.disconnect()
    return Replayed(violation, at, ran, run.requests)


def record_programs(
    participant: Callable[[], Participant],
    role: Role | str,
    *,
    examples: int,
    seed: int,
    steps: int = 25,
    restart: InProcessRestart | None = None,
    timeout: float = 10.0,
) -> tuple[Program, ...]:
    """The programs of a hypothesis search of the kit over fresh participants from
    `participant` (`examples` sequences of up to `steps` rule calls, drawn from `seed`),
    one per example, in the order they ran; a failing example ends the search (and its
    program, up to the failure, is the last)."""
    run, machine = _machine(participant, role, restart, timeout)
    recorded: list[Program] = []

    class Recording(machine):  # type: ignore[valid-type,misc]
        def teardown(self) -> None:
            recorded.append(tuple(self.program))
            super().teardown()

    test: Any = get_state_machine_test(
        Recording,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
            phases=(Phase.generate,),
        ),
    )
    try:
        hypothesis_seed(seed)(test)()
    except ConformanceViolation:
        pass
    finally:
        run.disconnect()
    return tuple(recorded)
