"""The controller of examples/agent_server.py and examples/resources_server.py, in a Ray
actor, driving them over HTTP.

`ToyController` is a plain class (tests drive it in process too); `ray.remote(ToyController)`
makes it an actor. It runs quiesce's controller (`build_controller`) over two clients: the
resources server's control routes (`HttpParticipant`), and the agent as `RunDispatch`, whose
dispatch of a rollout (the protocol's `begin`) is a POST to the agent service's own `/run`.
Its snapshots, intent record and epoch live in `state_dir`, so a controller killed at any
moment is succeeded by one that finishes the checkpoint in flight and restores the newest
snapshot (PROTOCOL.md §6, M9).
"""

from __future__ import annotations

import asyncio

import httpx

from quiesce.adapters import (
    CallFailedError,
    CompletionsReply,
    Driver,
    HttpParticipant,
    InMemoryDataPlane,
    InMemoryTrainer,
    Participant,
    PollCompletions,
    RealClock,
    build_controller,
    configure_logging,
)
from quiesce.protocol import Cause, QuiesceConfig
from quiesce.protocol.controller import GroupOpened, PeriodElapsed
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import ErrorReply, ExecutionReply, Message


class RunDispatch(Participant):
    """The agent service: control calls to its mounted control routes, and `begin` (a
    rollout's dispatch) to its own `POST /run`, which answers what `begin` answers."""

    def __init__(self, url: str, *, token: str, name: str) -> None:
        self.name = name
        self.control = HttpParticipant(url, token=token, name=name)
        self.service = httpx.AsyncClient(base_url=url)

    async def send(
        self, op: ParticipantOp, request: Message | None, deadline_at: float | None
    ) -> Message:
        if op is not ParticipantOp.BEGIN or request is None:
            return await self.control.send(op, request, deadline_at)
        try:
            response = await self.service.post(
                "/run",
                content=request.model_dump_json(),
                headers={"Content-Type": "application/json"},
            )
        except httpx.TimeoutException:
            raise CallFailedError(self.name, op, Cause.TIMEOUT, "/run timed out") from None
        except httpx.TransportError as error:
            raise CallFailedError(self.name, op, Cause.IO_ERROR, type(error).__name__) from None
        if response.status_code == 200:
            return ExecutionReply.model_validate_json(response.content)
        if response.status_code == 409:
            return ErrorReply.model_validate_json(response.content)  # a refusal is an answer
        detail = f"/run answered HTTP {response.status_code}"
        raise CallFailedError(self.name, op, Cause.PARTICIPANT_ERROR, detail)

    async def completions(self, *, deadline_at: float | None = None) -> CompletionsReply:
        return await self.control.completions(deadline_at=deadline_at)

    async def aclose(self) -> None:
        await self.control.aclose()
        await self.service.aclose()


class ToyController:
    """Dispatch prompt groups, checkpoint, and (a successor) restore. Each method is an
    actor method under Ray."""

    def __init__(self, *, agent_url: str, resources_url: str, token: str, state_dir: str) -> None:
        configure_logging("warning")
        self.clients: dict[str, Participant] = {
            "agent-0": RunDispatch(agent_url, token=token, name="agent-0"),
            "resources-0": HttpParticipant(resources_url, token=token, name="resources-0"),
        }
        self.trainer = InMemoryTrainer()
        self.plane = InMemoryDataPlane(self.trainer)
        self.driver: Driver = build_controller(
            self.clients,
            clock=RealClock(),
            completions=PollCompletions(interval_s=0.1),  # an HTTP agent cannot call back
            state_dir=state_dir,
            trainer=self.trainer,
            data_plane=self.plane,
            config=QuiesceConfig(control_timeout_s=5.0, prepare_timeout_s=10.0),
        )
        self._running: asyncio.Task[None] | None = None

    async def start(self) -> dict[str, object]:
        """Run the controller; discover the participants and restore (M9). Returns what
        the restore did: `kind` (`bootstrap` on a first start, `snapshot` after a restore),
        the snapshot, the intent record finished, and the attempts dispatched again."""
        self._running = asyncio.get_running_loop().create_task(self.driver.run())
        report = await self.driver.start()
        return {
            "kind": report.kind,
            "snapshot_id": report.snapshot_id,
            "intent_action": report.intent_action,
            "redispatched": report.redispatched,
        }

    async def dispatch(self, groups: int, siblings: int) -> None:
        """Open `groups` prompt groups of `siblings` rollouts each on the agent."""
        for _ in range(groups):
            prompt = self.plane.next_prompt()
            self.driver.submit(GroupOpened(f"p{prompt}", siblings, "agent-0", str(prompt)))

    async def checkpoint(self) -> dict[str, str]:
        """Take one checkpoint now; its id and result (`completed`, `failed`, `skipped`)."""
        seen = len(self.driver.outcomes)
        self.driver.submit(PeriodElapsed())
        await self.driver.wait_for(lambda _state: len(self.driver.outcomes) > seen)
        outcome = self.driver.outcomes[-1]
        return {"checkpoint_id": str(outcome.checkpoint_id), "result": outcome.result}

    async def stop(self) -> None:
        """Stop the controller cleanly."""
        self.driver.stop()
        if self._running is not None:
            await self._running
        for client in self.clients.values():
            await client.aclose()
