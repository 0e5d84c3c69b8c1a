"""Kills while a request is in flight (§6), and races of retire and ACK with a prepare."""

from __future__ import annotations

import asyncio
import threading

import anyio
from starlette.types import Receive, Scope, Send

from quiesce.adapters import ParticipantHost
from quiesce.protocol.participant import (
    ParticipantEffect,
    from_journal,
    handle,
    journal_of,
    new_participant,
)
from quiesce.protocol.wire import Role
from quiesce.testing import DEADLINE_AT, LocalServer, WireClient, check_conformance
from quiesce.testing._race import recoveries
from quiesce.testing._shapes import race_shapes

TOKEN = "during-tok-81c2"


class SlowJournalHost(ParticipantHost):
    """CONFORMING: the first journal write after `writing` is cleared lasts until the
    participant is killed (at most `write_s`), so a kill lands inside it however loaded the
    machine is. `writing` is set once that write is under way: a kill that waits for it
    cannot come before uvicorn has handed the request over."""

    write_s = 10.0
    writing = threading.Event()

    async def _persist(self, effects: tuple[ParticipantEffect, ...]) -> None:
        if not SlowJournalHost.writing.is_set():
            SlowJournalHost.writing.set()
            with anyio.move_on_after(self.write_s):
                while self.alive:
                    await anyio.sleep(0.01)
        await super()._persist(effects)


def test_a_kill_cuts_a_request_whose_journal_write_is_under_way() -> None:
    config = {"name": "policy-k", "role": "policy"}
    with LocalServer.start(config, token=TOKEN, host_class=SlowJournalHost) as server:
        client = WireClient(server.url, TOKEN)
        try:
            before = server.host.incarnation
            body = {"op_id": "ck-1-1-step1", "deadline_at": DEADLINE_AT}
            SlowJournalHost.writing.clear()

            def kill_inside_the_write() -> None:
                assert SlowJournalHost.writing.wait(30), "the prepare never began its write"
                server.restart()

            cut = client.send_while("prepare", body, kill_inside_the_write)
            assert cut is not None and cut.status == 503  # the killed participant's answer
            assert server.host.incarnation != before
            assert server.host.state.fence.state.value == "idle"  # never journaled
            fast = client.send_while("status", None, lambda: None)
            assert fast is not None and fast.status == 200
        finally:
            client.close()


def test_the_states_after_a_kill_are_the_journals_of_before_and_after() -> None:
    before = new_participant({"name": "p", "role": "policy"}, "inc-1")
    after = handle(before, "prepare", {"op_id": "ck-1-1-step1", "deadline_at": DEADLINE_AT})[0]
    cut = recoveries(before, after, answered=False, incarnation="inc-2")
    assert cut == (
        from_journal(journal_of(before), "inc-2"),
        from_journal(journal_of(after), "inc-2"),
    )
    assert recoveries(before, after, answered=True, incarnation="inc-2") == cut[1:]


def test_the_reference_conforms_when_killed_during_requests() -> None:
    config = {"name": "policy-d", "role": "policy"}
    with LocalServer.start(config, token=TOKEN) as server:
        result = check_conformance(
            server.url, "policy", TOKEN, examples=15, seed=2, reset=server.reset,
            restart=server.restart,
        )  # fmt: skip
    assert result.ok, result.report()
    assert result.restarts > 0


class LateReadingServer(LocalServer):
    """CONFORMING: uvicorn hands every control request to the participant late: once the
    participant was restarted, or after `late_s`. A kill during the request then restarts
    the participant before it ever sees the request, however loaded the machine is."""

    late_s = 5.0

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/control/v1/"):
            arrived_at = self.host
            with anyio.move_on_after(self.late_s):
                while self.host is arrived_at:
                    await asyncio.sleep(0.01)
        await super()._dispatch(scope, receive, send)


def test_a_request_the_restarted_participant_answers_is_judged_on_the_recovered_state() -> None:
    # CI once saw the kit blame the reference for "an incarnation that changed": the request
    # of a kill-during-request reached uvicorn's app only after the restart swapped hosts.
    config = {"name": "policy-l", "role": "policy"}
    with LateReadingServer.start(config, token=TOKEN) as server:
        client = WireClient(server.url, TOKEN)
        try:
            before = server.host.incarnation
            body = {"op_id": "ck-1-1-step1", "deadline_at": DEADLINE_AT}
            late = client.send_while("prepare", body, server.restart)
            assert late is not None and late.status == 200
            assert late.reply["incarnation"] == server.host.incarnation != before
        finally:
            client.close()
        server.late_s = 0.05  # every request of the kit is late; the kills it makes, during
        result = check_conformance(
            server.url, "policy", TOKEN, examples=8, seed=2, reset=server.reset,
            restart=server.restart,
        )  # fmt: skip
    assert result.ok, result.report()
    assert result.restarts > 0


def test_retire_and_ack_race_a_long_polling_prepare() -> None:
    raced = {op for shape in race_shapes(Role.AGENT, True) for op, _ in shape.requests}
    assert {"retire", "ack", "boundary", "finish", "discard", "restore"} <= raced
    config = {"name": "agent-r", "role": "agent"}
    with LocalServer.start(config, token=TOKEN) as server:
        result = check_conformance(
            server.url, "agent", TOKEN, examples=20, seed=5, reset=server.reset
        )
    assert result.ok, result.report()
    assert result.races > 0
