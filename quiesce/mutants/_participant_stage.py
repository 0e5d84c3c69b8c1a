"""The participant stage: a generated mutant of the participant's tables run in the real
participant runtime, judged by the conformance kit.

What lives here: `ParticipantStage`, the last of `STAGES`. It replays the recorded kit
programs (`_kit_programs.KIT_PROGRAMS`: request sequences with concurrent duplicates, races,
replays and restarts, a fresh participant each) on an in-process agent `ParticipantHost`
built with the mutant's `ParticipantRules`, and stops at the first program that breaks a
rule. What it does not know: which mutants reach it (`_stages.judge` asks `Site.reached`).

The judge. Every reply, and the `status` and `completions` read after each request, is
compared with the kit's oracle: the reference participant (`quiesce.protocol.handle`)
stepped with the protocol's OWN tables (`quiesce.testing._coverage.kit_rules`), never the
mutant's. So a kill here is a conformance failure on the wire (a reply, a refusal code, a
fence state or execution count, a receipt, what survives a restart), not a broken
invariant of the models: `killed_by` says `kit:<rule>`.

What it reaches, and why the models do not. The implementation model runs this same pure
participant, but its controller only sends what a controller sends; the kit sends what
retries, a duplicated or late request and a restart can deliver (a request of another or a
retired id, an ACK with a wrong receipt, a `finish` or `boundary` of a retired execution, a
`begin` of a claimed continuation, a failed restore tried again), and reads the state after
each. It never reaches what the pure core cannot do between two requests (an outcome
arriving after the fence moved on, a request joining one in flight) nor the data plane.

Determinism: the programs are fixed, each runs on a fresh host with fixed incarnations,
and the host answers at once, so overlapping requests are answered in the order sent. A
restart while a request is in flight (`restart(during=...)`) may land before or after it;
the kit accepts both for a conforming participant, and measured verdicts did not vary.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quiesce.fsm import RowLog, recording
from quiesce.models.coverage import RowCoverage
from quiesce.models.implementation import Hooks
from quiesce.protocol.participant import PARTICIPANT_RULES, ParticipantRules

if TYPE_CHECKING:
    from quiesce.testing import Program, Replayed

__all__ = ["ParticipantStage", "StageBroken"]

ROLE = "agent"
"""The role the programs drive: an agent fires the fence (M2) and its executions (M3)."""


class StageBroken(Exception):
    """The unmutated run of a stage found a violation: the stage itself is wrong."""


@contextmanager
def _quiet() -> Iterator[None]:
    """The hosts log every refusal at debug level: keep them out of the output (stdout
    carries `quiesce mutants --json`) while the stage runs."""
    import structlog

    configured, previous = structlog.is_configured(), structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        yield
    finally:
        if configured:
            structlog.configure(**previous)
        else:
            structlog.reset_defaults()


def _factory(rules: ParticipantRules) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    """A factory of fresh in-process agents whose host runs `rules`, and the restart hook
    that kills one and recovers it from its journal (by the same rules)."""
    from quiesce.adapters import (
        CompletionsReply,
        MemoryJournal,
        Participant,
        ParticipantHost,
        RealClock,
    )
    from quiesce.protocol.participant import ParticipantOp
    from quiesce.protocol.wire import Message

    class Hosted(Participant):
        """A `ParticipantHost` answering the kit in this process."""

        def __init__(self) -> None:
            self.name = "agent-0"
            self.restarts = 0
            self.host = ParticipantHost.start(
                {"name": self.name, "role": ROLE},
                clock=RealClock(),
                journal=MemoryJournal(),
                incarnation="inc-0",
                rules=rules,
            )

        def recovered(self) -> Hosted:
            journal = self.host.journal
            self.host.crash()
            again = copy.copy(self)
            again.restarts += 1
            incarnation = f"inc-{again.restarts}"
            if journal.load() is None:  # nothing journaled yet: it starts afresh
                again.host = ParticipantHost.start(
                    self.host.config,
                    clock=RealClock(),
                    journal=journal,
                    incarnation=incarnation,
                    rules=rules,
                )
            else:
                again.host = ParticipantHost.recover(
                    journal, incarnation, clock=RealClock(), rules=rules
                )
            return again

        async def send(
            self, op: ParticipantOp, request: Message | None, deadline_at: float | None
        ) -> Message:
            return await self.host.handle(op, request)

        async def completions(self, *, deadline_at: float | None = None) -> CompletionsReply:
            return self.host.completions()

    return Hosted, Hosted.recovered


def _replay(rules: ParticipantRules, programs: tuple[Program, ...]) -> Replayed:
    from quiesce.testing import replay_programs

    make, restart = _factory(rules)
    with _quiet():
        return replay_programs(make, ROLE, programs, restart=restart)


_COVERAGE: dict[str, RowCoverage] = {}


@dataclass(frozen=True)
class ParticipantStage:
    """One check a generated mutant must survive: `programs` replayed by the conformance
    kit on an agent `ParticipantHost` running the mutant's participant rules, to the first
    program that breaks a rule (the module docstring says what that means)."""

    name: str
    programs: tuple[Program, ...]
    doc: str

    def coverage(self) -> RowCoverage:
        """The rows of `control_fence` and `agent_execution` the host's pure calls fire and
        refuse over the unmutated run (computed once per process; workers forked afterwards
        inherit it). Raises `StageBroken` if the unmutated participant breaks a rule."""
        found = _COVERAGE.get(self.name)
        if found is None:
            log = RowLog()
            rules = ParticipantRules(
                fence=recording(PARTICIPANT_RULES.fence, log),
                agent=recording(PARTICIPANT_RULES.agent, log),
            )
            replayed = _replay(rules, self.programs)
            if replayed.violation is not None:
                raise StageBroken(
                    f"{self.name}: the unmutated participant fails recorded program "
                    f"{replayed.program}: {replayed.violation}"
                )
            found = RowCoverage(frozenset(log.fired), frozenset(log.refused))
            _COVERAGE[self.name] = found
        return found

    def run(self, site: Any, hooks: Hooks, name: str, prepare: Callable[[Any], None]) -> Replayed:
        """Replay the programs on hosts running `hooks.participant` (the mutant's rules; the
        site, the mutant's name and `prepare`, the models' hang watchdog, are not needed)."""
        return _replay(hooks.participant, self.programs)
