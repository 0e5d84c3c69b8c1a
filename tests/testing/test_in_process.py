"""`check_participant`: the conformance kit against a `Participant` object in this process
(no server, no socket): the reference participant passes, a broken one is caught and shrunk
when given as a factory, and reported unshrunk (with the reason) when given as one object."""

from __future__ import annotations

import copy
import secrets
from typing import Any

import pytest

from quiesce.adapters import (
    CallFailedError,
    CompletionsReply,
    MemoryJournal,
    Participant,
    ParticipantHost,
    RealClock,
)
from quiesce.protocol import Cause
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import Message
from quiesce.testing import StalePrepareHost, check_participant


class HostParticipant(Participant):
    """A `Participant` answered in process by a `ParticipantHost` (quiesce's participant
    core), of `host_class`: the reference one, or one of the broken hosts of the kit."""

    def __init__(self, role: str, host_class: type[ParticipantHost] = ParticipantHost) -> None:
        self.name = f"{role}-in-process"
        config = {"name": self.name, "role": role}
        self.host = host_class.start(config, clock=RealClock(), journal=MemoryJournal())

    def recovered(self) -> HostParticipant:
        """Kill this participant (calls in flight on it fail) and return the one recovered
        from its journal under a new incarnation (§6): a restart hook of `check_participant`."""
        journal = self.host.journal
        self.host.crash()
        again = copy.copy(self)
        if journal.load() is None:  # nothing journaled yet: it starts afresh
            again.host = type(self.host).start(self.host.config, clock=RealClock(), journal=journal)
        else:
            incarnation = f"inc-{secrets.token_hex(8)}"
            again.host = type(self.host).recover(journal, incarnation, clock=RealClock())
        return again

    def amnesiac(self) -> HostParticipant:
        """BROKEN (§6): a restart that loses the journal (a fresh participant)."""
        self.host.crash()
        again = copy.copy(self)
        again.host = type(self.host).start(
            self.host.config, clock=RealClock(), journal=MemoryJournal()
        )
        return again

    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        return await self.host.handle(op, request)

    async def completions(self, *, deadline_at: float | None = None) -> CompletionsReply:
        return self.host.completions()


class Unavailable(HostParticipant):
    """Raises `CallFailedError` for every commit: no usable answer, which a server would
    have sent as a 5xx."""

    async def send(self, op: ParticipantOp, request: Any, deadline_at: float | None) -> Message:
        if op is ParticipantOp.COMMIT:
            raise CallFailedError(self.name, op, Cause.IO_ERROR, "disk gone")
        return await super().send(op, request, deadline_at)


@pytest.mark.parametrize("role", ["agent", "resources"])
def test_the_reference_participant_in_process_conforms(role: str) -> None:
    result = check_participant(lambda: HostParticipant(role), role, examples=15, seed=1)
    assert result.ok, result.report()
    assert result.examples >= 15 and result.checks > result.examples
    assert result.participant == f"{role}-in-process"
    assert result.duplicates + result.races > 0  # concurrency rules reach the object too


def test_a_broken_participant_given_as_a_factory_is_caught_and_shrunk() -> None:
    result = check_participant(
        lambda: HostParticipant("policy", StalePrepareHost), "policy", examples=30, seed=3
    )
    assert not result.ok and result.violation is not None
    assert "stale_checkpoint" in result.violation.rule, result.report()
    assert result.shrunk and not result.not_shrunk_because
    last = result.violation.steps[-1]
    assert last.exchange.path.endswith("/prepare") and last.exchange.status == 200
    assert last.expected is not None and last.expected["code"] == "stale_checkpoint"
    sent = [step for step in result.violation.steps if not step.check]
    assert len(sent) <= 3, result.report()  # setup resume + the stale prepare (+1 slack)
    report = result.report()  # no server to replay against: no curl commands
    assert "in-process://" in report and "curl" not in report and "replay it by hand" not in report


def test_one_shared_participant_object_is_not_shrunk_and_says_why() -> None:
    shared = HostParticipant("policy", StalePrepareHost)
    result = check_participant(shared, "policy", examples=30, seed=3, max_failures=1)
    assert not result.ok and result.violation is not None
    assert not result.shrunk
    assert "pass a factory" in result.not_shrunk_because
    assert "pass a factory" in result.report()


def test_a_call_failed_error_is_judged_as_a_server_failure() -> None:
    result = check_participant(
        lambda: Unavailable("resources"), "resources", examples=30, seed=2, max_failures=1
    )
    assert not result.ok and result.violation is not None
    last = result.violation.steps[-1]
    assert last.exchange.path.endswith("/commit") and last.exchange.status == 503
    assert "disk gone" in str(last.exchange.reply), result.report()


def test_a_participant_of_another_role_is_a_setup_error() -> None:
    from quiesce.testing import ConformanceSetupError

    with pytest.raises(ConformanceSetupError, match="pass --role policy"):
        check_participant(HostParticipant("policy"), "agent", examples=1)


def test_something_that_is_not_a_participant_is_refused() -> None:
    with pytest.raises(TypeError, match="Participant or a callable"):
        check_participant("http://127.0.0.1:1", "policy")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="returned a str, not a Participant"):
        check_participant(lambda: "http://127.0.0.1:1", "policy", examples=1)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize("role", ["agent", "policy"])
def test_the_reference_in_process_conforms_across_restarts(role: str) -> None:
    result = check_participant(
        lambda: HostParticipant(role),
        role,
        examples=25,
        seed=3,
        restart=HostParticipant.recovered,
    )
    assert result.ok, result.report()
    assert result.restarts > 0


def test_an_in_process_restart_that_loses_the_journal_is_caught() -> None:
    result = check_participant(
        lambda: HostParticipant("policy"),
        "policy",
        examples=50,
        seed=1,
        restart=HostParticipant.amnesiac,
        max_failures=1,
    )
    assert not result.ok and result.violation is not None
    assert result.violation.rule_id == "durability", result.report()
    assert result.violation.rule.startswith("§6: what was replied before a crash")
    assert result.restarts > 0


def test_a_restart_hook_that_returns_no_participant_is_a_setup_error() -> None:
    from quiesce.testing import ConformanceSetupError

    with pytest.raises(ConformanceSetupError, match="returned a NoneType, not a Participant"):
        check_participant(
            lambda: HostParticipant("policy"),
            "policy",
            examples=30,
            seed=1,
            restart=lambda old: None,  # type: ignore[arg-type,return-value]
        )
