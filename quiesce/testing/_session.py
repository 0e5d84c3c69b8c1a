"""One conformance run: what all its examples share -- the server under test, who answers
there, the counters, the shortest violation seen.

What lives here: `KitRun`, the state one `check_conformance` call keeps across the
hypothesis examples, and discovery of the server (§2). What it does not know: the rules
or how requests are generated (`_machine`).
"""

from __future__ import annotations

import secrets
import subprocess
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError

from quiesce.adapters import Participant
from quiesce.fsm import QuiesceError, RowLog
from quiesce.protocol.participant import ParticipantConfig, ParticipantRules
from quiesce.protocol.wire import Capabilities, Role
from quiesce.testing._coverage import kit_rules
from quiesce.testing._deviations import Deviation
from quiesce.testing._inprocess import IN_PROCESS_URL, ParticipantTransport
from quiesce.testing._program import Program
from quiesce.testing._results import (
    ConformanceSetupError,
    ConformanceViolation,
    KitStep,
    brief,
)
from quiesce.testing._wire import ServerUnreachable, WireClient

__all__ = [
    "NO_FACTORY",
    "NO_RESET",
    "STUCK",
    "Abort",
    "InProcessRestart",
    "KitRun",
    "Reset",
    "Restart",
    "Server",
    "participant_restart_hook",
    "reset_hook",
    "restart_hook",
]


Server = str | Participant | Callable[[], AbstractContextManager[Any]]
"""What the kit checks: the URL of a running server or a `Participant` object in this process
(examples share either), or a factory whose context manager starts a fresh server per example
and yields its URL, an object with a `url` (like `LocalServer`) or a `Participant`."""


Reset = str | Callable[[], object]
"""How the kit gets a fresh participant before each example on a shared server: the URL of
a route that resets it (POSTed with the bearer token; any 2xx means done), or a callable
that does (its return value is ignored)."""

NO_RESET = (
    "the examples share one server and no reset hook was given, so a shorter sequence would "
    "not start from the state the failing one started from; pass --reset-url (or "
    "reset=... in Python) to get a fresh participant per example and a shrunk sequence"
)
"""Why a run on a shared server without a reset hook is not shrunk."""

NO_FACTORY = (
    "the examples share one participant object, so a shorter sequence would not start from "
    "the state the failing one started from; pass a factory instead (a callable returning a "
    "new participant, e.g. check_participant(lambda: MyParticipant(...), ...)) to get a fresh "
    "participant per example and a shrunk sequence"
)
"""Why a run on one shared in-process participant is not shrunk."""

STUCK = (
    "the server could not be brought back to an idle fence after the failing sequence, so "
    "no shorter one could be replayed against it; pass a reset hook (--reset-url, reset=...) "
    "or a factory of fresh servers to shrink"
)
"""Why a run whose failure left a shared server stuck is not shrunk."""


Restart = str | Callable[[], object]
"""How the kit kills and restarts the server under test (§6): a shell command (run to the
end; it must exit 0 with the server answering again on the same URL), or a callable."""


def restart_hook(restart: Restart, timeout: float) -> Callable[[], None]:
    """`restart` as a callable; a command is run by the shell and must exit 0 within
    `timeout` seconds (else a `ConformanceSetupError` naming the exit status)."""
    if not isinstance(restart, str):
        hook = restart

        def call() -> None:
            hook()

        return call
    command = restart
    # Errors are one line: a multi-line script is named by its words, on one line.
    named = " ".join(command.split())

    def run() -> None:
        try:
            done = subprocess.run(command, shell=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise ConformanceSetupError(named, f"the restart command ran over {timeout}s") from None
        if done.returncode != 0:
            raise ConformanceSetupError(
                named, f"the restart command exited {done.returncode}; it must exit 0"
            )

    return run


InProcessRestart = Callable[[Participant], Participant]
"""How `check_participant` restarts a participant object (§6): given the killed one, it
returns the participant that recovered from its journal (a new object, new incarnation)."""


def participant_restart_hook(run: KitRun, restart: InProcessRestart) -> Callable[[], None]:
    """`restart` as the run's restart hook: called on the client's event loop (where the
    participant's calls run, so it may crash the participant while one is in flight), and
    the participant it returns becomes the run's target, which the kit reconnects to."""

    def call() -> None:
        killed = run.target
        assert run.client is not None and isinstance(killed, Participant)
        restarted = run.client.call_in_loop(lambda: restart(killed))
        if not isinstance(restarted, Participant):
            raise ConformanceSetupError(
                run.url,
                f"the restart hook returned a {type(restarted).__name__}, not a Participant; "
                "it must return the participant recovered from the killed one's journal",
            )
        run.target = restarted

    return call


def reset_hook(reset: Reset, token: str, timeout: float) -> Callable[[], None]:
    """`reset` as a callable; a URL is POSTed with the bearer token and must answer 2xx
    (anything else is a `ConformanceSetupError` naming the status)."""
    if not isinstance(reset, str):
        hook = reset

        def call() -> None:
            hook()

        return call
    url = reset

    def post() -> None:
        try:
            answer = httpx.post(url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)
        except httpx.HTTPError as error:
            raise ConformanceSetupError(url, f"the reset hook got no answer ({error})") from None
        if not answer.is_success:
            raise ConformanceSetupError(
                url, f"the reset hook answered {answer.status_code}; it must answer 2xx"
            )

    return post


class Abort(BaseException):
    """Raised when shrinking cannot go on (a shared server is stuck) or the server is not
    what was asked for. A BaseException, so hypothesis does not try to shrink it."""

    def __init__(self, error: QuiesceError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class KitRun:
    """What every example of one run shares: the server, its identity, the counters."""

    server: Server
    token: str
    role: Role
    executions: bool
    timeout: float
    reset: Callable[[], None] | None = None
    restart: Callable[[], None] | None = None
    stop: threading.Event | None = None
    """Set by the caller to stop the run before its next request (`ConformanceStopped`)."""
    client: WireClient | None = None
    capabilities: Capabilities | None = None
    config: ParticipantConfig | None = None
    nonce: str = field(default_factory=lambda: secrets.token_hex(3))
    examples: int = 0
    checks: int = 0
    requests: int = 0
    allowed_failures: int = 0
    duplicates: int = 0
    races: int = 0
    restarts: int = 0
    best: ConformanceViolation | None = None
    last_failure: tuple[ConformanceViolation, Program] | None = None
    """The violation raised last and the rule calls that led to it (`_program`)."""
    previous: tuple[KitStep, ...] = ()
    stuck: bool = False
    setup_error: ConformanceSetupError | None = None
    url: str = ""
    target: Any = None
    """What the client was last connected to (a URL, an object with a `url`, or a
    `Participant`): what a restart reconnects to, unless the restart hook replaced it."""
    over_http: bool = True
    """False for a `Participant` object: the kit sends no malformed or unauthenticated
    requests (they test an HTTP layer the object does not have)."""
    deviations: tuple[Deviation, ...] = ()
    """Differences the server knowingly has: tolerated where they occur (`tolerated`)."""
    known: frozenset[str] = frozenset()
    """The failures this run already reported (their `key`): met again, stepped past too."""
    tolerated: dict[str, int] = field(default_factory=dict)
    """How often each declared deviation was met (by its `RULE[:SHAPE]`)."""
    repeats: int = 0
    """How often a failure already reported was met again (and stepped past)."""
    rules: ParticipantRules = field(init=False)
    """The tables the oracle steps: the protocol's, recording into `rows`."""
    rows: RowLog = field(init=False)
    """The rows the oracle fired in this run (its row coverage)."""

    def __post_init__(self) -> None:
        self.rules, self.rows = kit_rules()

    @property
    def agent(self) -> bool:
        return self.role is Role.AGENT

    def connect(self, target: str | Participant | Any) -> None:
        """Open a client on `target` (a URL, an object with a `url` like `LocalServer`, or a
        `Participant` in this process) and learn who answers there (discovery, §2)."""
        self.disconnect()
        self.target = target
        if isinstance(target, Participant):
            transport = ParticipantTransport(target)
            self.client = WireClient(
                IN_PROCESS_URL, self.token, timeout=self.timeout, async_transport=transport
            )
        else:
            url = target if isinstance(target, str) else str(target.url)
            self.client = WireClient(url, self.token, timeout=self.timeout)
        self.url = self.client.url
        self.capabilities, self.config = _discover(self.client, self.role)

    def fresh_participant(self) -> None:
        """Run the reset hook, then learn who answers now (a new incarnation, likely)."""
        assert self.reset is not None
        self.reset()
        self.connect(self.url)

    def disconnect(self) -> None:
        if self.client is not None:
            self.requests += self.client.requests
            self.client.close()
            self.client = None

    def excuse(self, violation: ConformanceViolation) -> bool:
        """True (and counted) iff `violation` is a declared deviation or a failure this run
        already reported: the kit steps past it instead of stopping there."""
        for deviation in self.deviations:
            if deviation.covers(violation):
                name = str(deviation)
                self.tolerated[name] = self.tolerated.get(name, 0) + 1
                return True
        if violation.key in self.known:
            self.repeats += 1
            return True
        return False

    def found(self, violation: ConformanceViolation, program: Program = ()) -> None:
        """Keep the shortest violation seen (reported if the run cannot finish shrinking),
        and the last one with its `program`."""
        self.last_failure = (violation, program)
        if self.best is None or len(violation.steps) < len(self.best.steps):
            self.best = violation


def _discover(client: WireClient, role: Role) -> tuple[Capabilities, ParticipantConfig]:
    try:
        exchange = client.send("capabilities")
    except ServerUnreachable as error:
        raise ConformanceSetupError(client.url, str(error)) from None
    if exchange.status != 200:
        detail = f"capabilities answered {exchange.status} {brief(exchange.reply)}"
        if exchange.status == 401:
            detail += " (wrong bearer token?)"
        raise ConformanceSetupError(client.url, detail)
    try:
        caps = Capabilities.model_validate(exchange.reply)
    except ValidationError as error:
        raise ConformanceSetupError(client.url, f"capabilities do not parse: {error}") from None
    if caps.role is not role:
        raise ConformanceSetupError(
            client.url,
            f"the server is a {caps.role} participant, not a {role}; pass --role {caps.role}",
        )
    config = ParticipantConfig(
        name=caps.participant,
        role=caps.role,
        instance_role=caps.instance_role,
        recovery_mode=caps.recovery_mode,
        group_scored=caps.group_scored,
        group_size=caps.group_size,
        multi_process=caps.multi_process,
        features=caps.features,
    )
    return caps, config
