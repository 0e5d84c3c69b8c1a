"""Participants as Ray actors, and the `Participant` client that calls them (`quiesce[ray]`).

What lives here: `ParticipantActor`, a plain class that Ray turns into an async actor
wrapping one `ParticipantHost` on asyncio (its journal in `state_dir`, or in memory), and
`RayParticipant`, the client. What it does not know: any protocol rule (the host's pure
participant answers) or how the cluster is started (the caller runs `ray.init`).

The payloads are the same wire models as HTTP, as JSON text, so every adapter speaks one
protocol. Failures become a `Cause` once, here:

| what happened | cause |
|---|---|
| no reply before `deadline_at` | `TIMEOUT` (the task is cancelled) |
| the actor died / is unreachable (`RayActorError`) | `IO_ERROR` |
| the actor raised (`RayTaskError`: journal write failed, host stopped) | `PARTICIPANT_ERROR` |
| a reply that does not parse | `PARTICIPANT_ERROR` (`error`: the `RemoteProtocolError`) |

`ray` is imported lazily, so `quiesce` imports without the extra. A driver started with
`uv run` should set `RAY_ENABLE_UV_RUN_RUNTIME_ENV=0` before importing ray, or Ray starts
its workers in a fresh `uv` environment without the extra (they die on `import ray`).
Awaiting a Ray object ref needs asyncio: this client runs on the asyncio backend only.

>>> RayParticipant.__name__
'RayParticipant'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from quiesce.adapters._clock import Clock, RealClock
from quiesce.adapters._host_journal import FileJournal, JournalSink, MemoryJournal
from quiesce.adapters._participant_api import (
    REPLY_MODELS,
    CallFailedError,
    CompletionsReply,
    Participant,
)
from quiesce.adapters._participant_host import HostStopped, ParticipantHost, secret_incarnation
from quiesce.protocol import Cause, RemoteProtocolError
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import ErrorReply, Message, parse_reply

__all__ = ["ParticipantActor", "RayParticipant", "RayUnavailable", "spawn_ray_participant"]

DEFAULT_TIMEOUT_S = 10.0


class RayUnavailable(ImportError):
    """`ray` is not installed: install the extra, `pip install 'quiesce[ray]'`."""

    def __init__(self) -> None:
        super().__init__("the Ray adapter needs ray: install it with `pip install 'quiesce[ray]'`")


def _ray() -> Any:
    try:
        import ray
    except ImportError as error:
        raise RayUnavailable() from error
    return ray


class ParticipantActor:
    """One participant inside a Ray actor (create it with `spawn_ray_participant`).

    `config` is a `ParticipantConfig` mapping; `state_dir` keeps the journal on the
    actor's node (fsynced before replying), else it lives in the actor's memory. An
    existing journal is recovered under a new incarnation (§6)."""

    def __init__(self, config: dict[str, Any], state_dir: str | None = None) -> None:
        journal: JournalSink = FileJournal(Path(state_dir)) if state_dir else MemoryJournal()
        self._host = ParticipantHost.open(
            config, journal, clock=RealClock(), incarnation_factory=secret_incarnation
        )
        self._runner: Any = None

    async def _ensure_running(self) -> None:
        # The role's work needs a task on the actor's loop; start it with the first call.
        if self._runner is None:
            import asyncio

            self._runner = asyncio.get_running_loop().create_task(self._host.run())

    async def handle(self, op: str, body: str | None) -> tuple[bool, str]:
        """Answer `op` with JSON `body`: `(is_refusal, reply JSON)`."""
        await self._ensure_running()
        request: Any = None
        if body is not None:
            try:
                request = json.loads(body)
            except ValueError:
                request = body  # the pure participant refuses it as malformed, naming it
        reply = await self._host.handle(op, request)
        return isinstance(reply, ErrorReply), reply.model_dump_json()

    async def completions(self) -> str:
        """The completed-but-unACKed receipts (JSON `CompletionsReply`)."""
        await self._ensure_running()
        return self._host.completions().model_dump_json()

    async def crash(self) -> None:
        """Stop the host (executions die; the journal stays) without killing the actor."""
        self._host.crash()


def spawn_ray_participant(
    config: dict[str, Any],
    *,
    state_dir: str | Path | None = None,
    clock: Clock | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **actor_options: Any,
) -> RayParticipant:
    """Start a `ParticipantActor` (Ray must be initialised) and return its client.

    `actor_options` go to `.options(...)` (e.g. `num_cpus=0`, `name=...`)."""
    ray = _ray()
    options = {"num_cpus": 0, **actor_options}
    actor_class = ray.remote(ParticipantActor)
    actor = actor_class.options(**options).remote(
        dict(config), str(state_dir) if state_dir is not None else None
    )
    return RayParticipant(actor, name=str(config["name"]), clock=clock, timeout_s=timeout_s)


class RayParticipant(Participant):
    """A client calling a `ParticipantActor` handle (asyncio only, see the module doc)."""

    def __init__(
        self,
        actor: Any,
        *,
        name: str,
        clock: Clock | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.actor = actor
        self.name = name
        self.clock = clock or RealClock()
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"RayParticipant(name={self.name!r})"

    async def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Wait until the actor answers (its worker process may take seconds to start).
        Raises `CallFailedError` if it does not answer within `timeout_s`."""
        await self.capabilities(deadline_at=self.clock.now() + timeout_s)

    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        body = request.model_dump_json() if request is not None else None
        refused, text = await self._await(op, self.actor.handle.remote(op.value, body), deadline_at)
        return self._parse(op, ErrorReply if refused else REPLY_MODELS[op], text)

    async def completions(self, *, deadline_at: float | None = None) -> CompletionsReply:
        """Receipts of the agent's completed-but-unACKed executions."""
        op = ParticipantOp.STATUS
        text = await self._await(op, self.actor.completions.remote(), deadline_at)
        reply = self._parse(op, CompletionsReply, text)
        assert isinstance(reply, CompletionsReply)
        return reply

    async def _await(self, op: ParticipantOp, ref: Any, deadline_at: float | None) -> Any:
        ray = _ray()
        deadline = deadline_at if deadline_at is not None else self.clock.now() + self.timeout_s
        if deadline <= self.clock.now():
            ray.cancel(ref)
            raise CallFailedError(self.name, op, Cause.TIMEOUT, "deadline already passed")
        try:
            with self.clock.fail_at(deadline):
                return await ref
        except TimeoutError as error:
            ray.cancel(ref)
            raise CallFailedError(self.name, op, Cause.TIMEOUT, "no reply before the deadline",
                             error=error) from None  # fmt: skip
        except ray.exceptions.RayActorError as error:
            raise CallFailedError(self.name, op, Cause.IO_ERROR, type(error).__name__,
                             error=error) from None  # fmt: skip
        except (ray.exceptions.RayTaskError, HostStopped) as error:
            raise CallFailedError(self.name, op, Cause.PARTICIPANT_ERROR, type(error).__name__,
                             error=error) from None  # fmt: skip

    def _parse(self, op: ParticipantOp, model: type[Message], text: Any) -> Message:
        try:
            return parse_reply(model, self.name, text, retryable=True)
        except RemoteProtocolError as error:
            raise CallFailedError(
                self.name, op, Cause.PARTICIPANT_ERROR, str(error), error=error
            ) from None
