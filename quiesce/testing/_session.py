"""One conformance run: what all its examples share -- the server under test, who answers
there, the counters, the shortest violation seen.

What lives here: `KitRun`, the state one `check_conformance` call keeps across the
hypothesis examples, and discovery of the server (§2). What it does not know: the rules
or how requests are generated (`_machine`).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from quiesce.fsm import QuiesceError
from quiesce.protocol.participant import ParticipantConfig
from quiesce.protocol.wire import Capabilities, Role
from quiesce.testing._results import (
    ConformanceSetupError,
    ConformanceViolation,
    KitStep,
    brief,
)
from quiesce.testing._wire import ServerUnreachable, WireClient

__all__ = ["Abort", "KitRun", "Server"]


Server = str | Callable[[], AbstractContextManager[Any]]
"""What the kit checks: the URL of a running server (examples share it), or a factory whose
context manager starts a fresh server per example and yields its URL (or an object with a
`url`, like `LocalServer`)."""


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
    client: WireClient | None = None
    capabilities: Capabilities | None = None
    config: ParticipantConfig | None = None
    nonce: str = field(default_factory=lambda: secrets.token_hex(3))
    examples: int = 0
    checks: int = 0
    requests: int = 0
    allowed_failures: int = 0
    duplicates: int = 0
    best: ConformanceViolation | None = None
    previous: tuple[KitStep, ...] = ()
    stuck: bool = False
    setup_error: ConformanceSetupError | None = None
    url: str = ""

    @property
    def agent(self) -> bool:
        return self.role is Role.AGENT

    def connect(self, url: str) -> None:
        """Open a client on `url` and learn who answers there (discovery, §2)."""
        self.disconnect()
        self.client = WireClient(url, self.token, timeout=self.timeout)
        self.url = self.client.url
        self.capabilities, self.config = _discover(self.client, self.role)

    def disconnect(self) -> None:
        if self.client is not None:
            self.requests += self.client.requests
            self.client.close()
            self.client = None

    def found(self, violation: ConformanceViolation) -> None:
        """Keep the shortest violation seen (reported if the run cannot finish shrinking)."""
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
