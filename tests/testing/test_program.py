"""The kit's own shortening pass: an example recorded as its top-level rule calls, replayed
on a fresh participant, and shortened by deleting whole steps where hypothesis's shrinker
stops at a local minimum."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from quiesce.protocol.wire import Role
from quiesce.testing import BROKEN_HOSTS, LocalServer
from quiesce.testing._machine import ENDINGS, ConformanceMachine
from quiesce.testing._program import Program, replay, shorten
from quiesce.testing._session import KitRun, reset_hook

TOKEN = "program-tok-5d1e"


@pytest.fixture
def machine() -> Iterator[type[ConformanceMachine]]:
    """The kit's machine on an agent that releases a completed result on retire (S17)."""
    config = {"name": "agent-p", "role": "agent"}
    host = BROKEN_HOSTS["release-on-retire"]
    with LocalServer.start(config, token=TOKEN, host_class=host) as server:
        run = KitRun(server.url, TOKEN, Role.AGENT, True, 10.0, reset_hook(server.reset, TOKEN, 10))
        run.connect(server.url)
        try:
            yield type("ConformanceMachine", (ConformanceMachine,), {"run": run})
        finally:
            run.disconnect()


def _lifecycle(ending: str) -> tuple[str, dict[str, object]]:
    arguments = {"kind": "execution_lifecycle", "turns": 2, "pick": 0, "intact": True}
    return ("scenario", {**arguments, "variant": ENDINGS.index(ending)})


def test_an_example_records_its_top_level_rule_calls(machine: type[ConformanceMachine]) -> None:
    example = machine()
    try:
        example.checkpoint()  # itself a prepare and a commit: those calls are not steps
        example.prepare(at="next")
        assert example.program == [("checkpoint", {}), ("prepare", {"at": "next"})]
    finally:
        example.teardown()


def test_a_program_whose_precondition_fails_is_not_replayed(
    machine: type[ConformanceMachine],
) -> None:
    assert replay(machine, (("replay", {"index": 0}),)) is None  # nothing sent yet


def test_steps_the_failure_does_not_need_are_deleted(machine: type[ConformanceMachine]) -> None:
    program: Program = (*[_lifecycle("ack_twice")] * 3, _lifecycle("retire_then_ack"))
    found = replay(machine, program)
    assert found is not None
    long, recorded = found
    assert recorded == program
    assert len(long.sequence) == 1 + 3 * 5 + 4  # the setup, 3 lifecycles, the failing one

    short = shorten(machine, program, long)

    assert short.rule == long.rule and "S17" in short.rule
    # the setup resume, then begin, boundary, finish and the retire that released it
    assert [s.exchange.path.rsplit("/", 1)[-1] for s in short.sequence] == [
        "resume",
        "begin",
        "boundary",
        "finish",
        "retire",
    ]


def test_a_passing_program_is_left_alone(machine: type[ConformanceMachine]) -> None:
    assert replay(machine, (_lifecycle("ack_twice"), ("pause", {}))) is None
