"""quiesce.testing: the conformance kit for participant servers you did not write.

Check any server speaking the control routes of docs/wire.md against the reference
participant of `quiesce.protocol` (the oracle), with hypothesis-generated request sequences;
a failure comes back as the shortest failing sequence of HTTP requests, with the expected
and the actual reply:

>>> from quiesce.testing import LocalServer, check_conformance
>>> with LocalServer.start({"name": "p", "role": "policy"}, token="t") as server:
...     result = check_conformance(server.url, "policy", "t", examples=5)
>>> result.ok
True

A `Participant` object of your own (the client interface the driver calls,
docs/embedding.md) is checked the same way in process, without a server: give
`check_participant` a factory of fresh participants, so a failure is shrunk too:

>>> from quiesce.adapters import Participant, ParticipantHost, RealClock
>>> from quiesce.testing import check_participant
>>> class Hosted(Participant):
...     def __init__(self):
...         self.name = "p"
...         self.host = ParticipantHost.start({"name": "p", "role": "policy"}, clock=RealClock())
...     async def send(self, op, request, deadline_at):
...         return await self.host.handle(op, request)
...     async def completions(self, *, deadline_at=None):
...         return self.host.completions()
>>> check_participant(Hosted, "policy", examples=3).ok
True

From the command line: `quiesce conform --url URL --role ROLE --token-file F`. In a pytest
suite: `pytest_plugins = ["quiesce.testing.plugin"]` gives the `quiesce_conformance`
fixture, or call `assert_conforms` directly. `_kit.py`'s docstring says exactly what is
checked, and how one server is reused across examples.
"""

from quiesce.testing._broken import (
    BROKEN_HOSTS,
    BusyDuplicateHost,
    FlakyCommitHost,
    RefusalOrderHost,
    ReleasedPrepareActsOnMovedFenceHost,
    ReleaseOnRetireHost,
    ReplayAfterPhaseMovedHost,
    ReplyBeforeFsyncHost,
    StalePrepareClobbersNextHost,
    StalePrepareHost,
    StuckAfterOvertakenPrepareHost,
    StuckCommitHost,
    WholeBatchAckHost,
)
from quiesce.testing._coverage import kit_rules
from quiesce.testing._deviations import (
    Deviation,
    UnknownDeviation,
    parse_deviation,
    read_deviations,
)
from quiesce.testing._kit import assert_conforms, check_conformance, check_participant
from quiesce.testing._local import LocalServer, ServerDidNotStart, free_port
from quiesce.testing._machine import DEADLINE_AT, ENDINGS
from quiesce.testing._program import Program
from quiesce.testing._replay import Replayed, record_programs, replay_programs
from quiesce.testing._results import (
    ConformanceResult,
    ConformanceSetupError,
    ConformanceStopped,
    ConformanceViolation,
    KitStep,
)
from quiesce.testing._wire import OPERATIONS, Exchange, ServerUnreachable, WireClient

__all__ = [
    "BROKEN_HOSTS",
    "DEADLINE_AT",
    "ENDINGS",
    "OPERATIONS",
    "BusyDuplicateHost",
    "ConformanceResult",
    "ConformanceSetupError",
    "ConformanceStopped",
    "ConformanceViolation",
    "Deviation",
    "Exchange",
    "FlakyCommitHost",
    "KitStep",
    "LocalServer",
    "Program",
    "RefusalOrderHost",
    "ReleaseOnRetireHost",
    "ReleasedPrepareActsOnMovedFenceHost",
    "ReplayAfterPhaseMovedHost",
    "Replayed",
    "ReplyBeforeFsyncHost",
    "ServerDidNotStart",
    "ServerUnreachable",
    "StalePrepareClobbersNextHost",
    "StalePrepareHost",
    "StuckAfterOvertakenPrepareHost",
    "StuckCommitHost",
    "UnknownDeviation",
    "WholeBatchAckHost",
    "WireClient",
    "assert_conforms",
    "check_conformance",
    "check_participant",
    "free_port",
    "kit_rules",
    "parse_deviation",
    "read_deviations",
    "record_programs",
    "replay_programs",
]
