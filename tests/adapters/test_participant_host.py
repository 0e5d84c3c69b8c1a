"""ParticipantHost: journal before reply, duplicates, crash + recover, role work on the
VirtualClock."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import anyio
import pytest

from quiesce.adapters import (
    FileJournal,
    ForeignJournal,
    HostRef,
    HostStopped,
    InMemoryFleet,
    JournalCorrupt,
    JournalSink,
    MemoryJournal,
    NoJournal,
    ParticipantHost,
    RealClock,
    VirtualClock,
    WorkConfig,
)
from quiesce.protocol import ParticipantOp, journal_of
from quiesce.protocol.machines import AGENT_EXECUTION, AgentInput, ExecState
from quiesce.protocol.participant import PARTICIPANT_RULES, Journal, ParticipantRules
from quiesce.protocol.wire import (
    AckRequest,
    BeginRequest,
    CommitReply,
    ControlRequest,
    ErrorReply,
    ExecutionReply,
    PrepareReply,
    Receipt,
    ResumeReply,
    StatusReply,
)

pytestmark = pytest.mark.anyio

P = ParticipantOp
CK1 = "ck-1-1-step0"
CK2 = "ck-1-2-step1"


def ctl(op_id: str, deadline_at: float = 1e9) -> ControlRequest:
    return ControlRequest.model_validate({"op_id": op_id, "deadline_at": deadline_at})


class SlowJournal(JournalSink):
    """A journal whose writes block until `release` is set; records what reached 'disk'."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.release = clock.event()
        self.started = clock.event()
        self.journal: Journal | None = None
        self.writes = 0

    async def write(self, journal: Journal) -> None:
        self.started.set()
        await self.release.wait()
        self.journal = journal
        self.writes += 1

    def load(self) -> Journal | None:
        return self.journal


async def test_journal_is_written_before_the_reply_is_released() -> None:
    clock = VirtualClock(seed=1)

    async def main() -> None:
        journal = SlowJournal(clock)
        host = ParticipantHost.start(
            {"name": "pol", "role": "policy"}, clock=clock, journal=journal
        )
        replies: list[Any] = []

        async def prepare() -> None:
            replies.append(await host.handle(P.PREPARE, ctl(CK1)))

        async with clock.task_group() as tg:
            tg.start_soon(prepare)
            await journal.started.wait()
            await clock.sleep(5.0)
            # The write is stuck: no reply yet, and the state is not released either.
            assert replies == []
            assert host.state.fence.state.value == "idle"
            journal.release.set()
        assert isinstance(replies[0], PrepareReply) and replies[0].status == "ready"
        assert journal.writes == 1 and journal.journal is not None
        assert journal.journal.fence.value == "prepared"
        assert journal.journal == journal_of(host.state)

    await clock.run(main)


async def test_failed_journal_write_releases_nothing() -> None:
    clock = VirtualClock(seed=2)

    async def main() -> None:
        journal = MemoryJournal()
        host = ParticipantHost.start(
            {"name": "pol", "role": "policy"}, clock=clock, journal=journal
        )
        journal.fail_writes = True
        with pytest.raises(OSError, match="injected"):
            await host.handle(P.PREPARE, ctl(CK1))
        assert host.state.fence.state.value == "idle"
        journal.fail_writes = False
        reply = await host.handle(P.PREPARE, ctl(CK1))  # a retry runs again (nothing recorded)
        assert isinstance(reply, PrepareReply) and reply.status == "ready"

    await clock.run(main)


async def test_concurrent_duplicate_waits_for_the_first_and_gets_its_reply() -> None:
    clock = VirtualClock(seed=3)

    async def main() -> None:
        journal = SlowJournal(clock)
        host = ParticipantHost.start(
            {"name": "pol", "role": "policy"}, clock=clock, journal=journal
        )
        replies: list[Any] = []

        async def prepare() -> None:
            replies.append(await host.handle(P.PREPARE, ctl(CK1)))

        async with clock.task_group() as tg:
            tg.start_soon(prepare)
            await journal.started.wait()
            tg.start_soon(prepare)  # same (op_id, op) while the first is in flight
            await clock.sleep(1.0)
            assert replies == []
            journal.release.set()
        assert len(replies) == 2
        assert replies[0] is replies[1]  # one execution, one answer
        assert journal.writes == 1

    await clock.run(main)


async def test_refusal_is_a_reply_and_changes_nothing() -> None:
    clock = VirtualClock(seed=4)

    async def main() -> None:
        host = ParticipantHost.start({"name": "pol", "role": "policy"}, clock=clock)
        await host.handle(P.PREPARE, ctl(CK2))
        before = host.state
        conflict = await host.handle(P.PREPARE, ctl("ck-1-3-step2"))
        assert isinstance(conflict, ErrorReply) and conflict.code == "checkpoint_conflict"
        assert str(conflict.active_id) == CK2
        malformed = await host.handle(P.COMMIT, {"op_id": 7, "deadline_at": 1})
        assert isinstance(malformed, ErrorReply) and malformed.code == "malformed_request"
        assert host.state == before

    await clock.run(main)


async def test_crash_and_recover_keep_exactly_the_journal(tmp_path: Path) -> None:
    clock = VirtualClock(seed=5)

    async def main() -> None:
        journal = FileJournal(tmp_path)
        agent = ParticipantHost.start(
            {"name": "agent-0", "role": "agent"}, clock=clock, journal=journal, run_work=False
        )
        begin = BeginRequest(rollout_id="r1", attempt=0, group_id="g1", turns=2)
        assert isinstance(await agent.handle(P.BEGIN, begin), ExecutionReply)
        finished = await agent.handle(
            P.FINISH, {"rollout_id": "r1", "attempt": 0, "result": {"reward": 1}}
        )
        assert isinstance(finished, ExecutionReply) and finished.receipt is not None
        begin2 = BeginRequest(rollout_id="r2", attempt=0, group_id="g1", turns=2)
        await agent.handle(P.BEGIN, begin2)  # running: dies with the process
        await agent.handle(P.PREPARE, ctl(CK1))
        on_disk = journal.load()
        assert on_disk == journal_of(agent.state)
        old = agent.incarnation
        agent.crash()
        with pytest.raises(HostStopped):
            await agent.handle(P.STATUS)

        again = ParticipantHost.recover(journal, "inc-new", clock=clock)
        assert again.incarnation == "inc-new" != old
        assert journal_of(again.state).model_copy(update={}) == on_disk
        status = await again.handle(P.STATUS)
        assert isinstance(status, StatusReply)
        assert status.fence == "preparing" and status.incarnation == "inc-new"
        assert status.completed_unacknowledged == 1 and status.live_executions == 0
        assert [r.rollout_id for r in again.completions().receipts] == ["r1"]
        ack = AckRequest(receipts=(finished.receipt,))
        acked = await again.handle(P.ACK, ack)
        assert not isinstance(acked, ErrorReply) and len(acked.acknowledged) == 1
        assert again.completions().receipts == ()

    await clock.run(main)


def test_recover_without_journal_and_corrupt_journal_are_typed(tmp_path: Path) -> None:
    clock = VirtualClock()
    with pytest.raises(NoJournal):
        ParticipantHost.recover(MemoryJournal(), "inc-x", clock=clock)
    (tmp_path / "journal.json").write_bytes(_sealed(b'{"format": 1, "config": {"name": 3}}'))
    with pytest.raises(JournalCorrupt) as error:
        ParticipantHost.recover(FileJournal(tmp_path), "inc-x", clock=clock)
    assert "journal.json" in str(error.value) and error.value.field.startswith("config")


def _sealed(body: bytes) -> bytes:
    """A journal file (format 2) built by hand: the checksum header, then `body`."""
    return b"quiesce-journal 2 sha256=%s\n%s" % (hashlib.sha256(body).hexdigest().encode(), body)


def _agent_journal_file(state_dir: Path) -> FileJournal:
    """The journal an agent host wrote in `state_dir` (through `FileJournal.write`): one
    completed execution `r1` (attempt 0) and a prepare under way."""
    clock = VirtualClock(seed=7)
    journal = FileJournal(state_dir)

    async def main() -> None:
        agent = ParticipantHost.start(
            {"name": "agent-0", "role": "agent"}, clock=clock, journal=journal, run_work=False
        )
        begin = BeginRequest(rollout_id="r1", attempt=0, group_id="g1", turns=2)
        await agent.handle(P.BEGIN, begin)
        await agent.handle(P.FINISH, {"rollout_id": "r1", "attempt": 0, "result": {"r": 1}})
        await agent.handle(P.PREPARE, ctl(CK1))

    anyio.run(clock.run, main)
    return journal


def _refused(journal: FileJournal, data: bytes) -> JournalCorrupt:
    """Write `data` as `journal`'s file; check that opening it is refused with a typed error
    naming the file and the fix, and that the file is left byte for byte as it was."""
    journal.path.write_bytes(data)
    with pytest.raises(JournalCorrupt) as caught:
        ParticipantHost.open({"name": "agent-0", "role": "agent"}, journal, clock=VirtualClock())
    message = str(caught.value)
    assert caught.value.path == journal.path and str(journal.path) in message
    assert "backup" in message and "ParticipantHost.start" in message
    assert journal.path.read_bytes() == data
    return caught.value


def test_a_file_journal_carries_the_sha256_of_its_body(tmp_path: Path) -> None:
    journal = _agent_journal_file(tmp_path)
    raw = journal.path.read_bytes()
    body = raw.partition(b"\n")[2]
    assert raw == _sealed(body)
    loaded = journal.load()
    assert loaded == Journal.model_validate_json(body) and str(loaded.active_id) == CK1
    recovered = ParticipantHost.recover(journal, "inc-2", clock=VirtualClock())
    assert journal_of(recovered.state).completed[0].rollout_id == "r1"


@pytest.mark.parametrize(
    "before",
    [b'"rollout_id":"r', b'"attempt":', b"sha256="],
    ids=["in-a-string-value", "in-a-number", "in-the-checksum"],
)
def test_a_flipped_character_is_refused_naming_both_digests(tmp_path: Path, before: bytes) -> None:
    raw = bytearray(_agent_journal_file(tmp_path).path.read_bytes())
    at = raw.index(before) + len(before)
    raw[at] = ord("1") if raw[at] != ord("1") else ord("2")
    header, _, body = bytes(raw).partition(b"\n")
    Journal.model_validate_json(body)  # still a valid journal: only the checksum tells
    error = _refused(FileJournal(tmp_path), bytes(raw))
    assert error.field == "sha256"
    expected, found = header[-64:].decode(), hashlib.sha256(body).hexdigest()
    assert expected != found and f"expects sha256 {expected}" in str(error)
    assert f"has sha256 {found}" in str(error)


def test_a_truncated_file_journal_is_refused(tmp_path: Path) -> None:
    journal = _agent_journal_file(tmp_path)
    raw = journal.path.read_bytes()
    body_at = raw.index(b"\n") + 1
    for cut, field in [
        (0, "header"),
        (body_at // 2, "header"),
        (body_at, "sha256"),
        ((body_at + len(raw)) // 2, "sha256"),
        (len(raw) - 1, "sha256"),
    ]:
        assert _refused(journal, raw[:cut]).field == field


def test_an_old_or_unknown_journal_file_format_is_refused(tmp_path: Path) -> None:
    journal = _agent_journal_file(tmp_path)
    raw = journal.path.read_bytes()
    old = _refused(journal, raw.partition(b"\n")[2])  # format 1: the bare JSON
    assert old.field == "header" and "no checksum" in old.detail and "old" in old.detail
    future = _refused(journal, raw.replace(b"quiesce-journal 2", b"quiesce-journal 3", 1))
    assert future.field == "header" and "unknown journal file format 3" in future.detail


async def test_open_recovers_with_a_new_incarnation(tmp_path: Path) -> None:
    clock = VirtualClock(seed=6)

    async def main() -> None:
        config = {"name": "res", "role": "resources", "recovery_mode": "export_restore"}
        first = ParticipantHost.open(config, FileJournal(tmp_path), clock=clock)
        await first.handle(P.PREPARE, ctl(CK1))
        first.crash()
        second = ParticipantHost.open(config, FileJournal(tmp_path), clock=clock)
        assert second.incarnation != first.incarnation
        assert second.state.fence.state.value == "prepared"
        with pytest.raises(ForeignJournal, match="belongs to resources"):
            ParticipantHost.open(
                {"name": "other", "role": "policy"}, FileJournal(tmp_path), clock=clock
            )

    await clock.run(main)


# ------------------------------------------------------------------------ role work


def _fleet(clock: VirtualClock, completions: list[Receipt]) -> tuple[ParticipantHost, ...]:
    policy = ParticipantHost.start({"name": "policy-0", "role": "policy"}, clock=clock)
    resources = ParticipantHost.start(
        {"name": "res-0", "role": "resources", "recovery_mode": "export_restore"}, clock=clock
    )
    agent = ParticipantHost.start({"name": "agent-0", "role": "agent"}, clock=clock)
    agent.connect(
        policies=[HostRef(policy)],
        resources=[HostRef(resources)],
        on_completed=lambda _, receipt: completions.append(receipt),
    )
    return policy, agent, resources


async def _checkpoint(
    clock: VirtualClock, hosts: tuple[ParticipantHost, ...], op_id: str
) -> list[Any]:
    """prepare in phase order (retrying not_ready), commit, resume in resume order."""
    policy, agent, resources = hosts
    for host in (policy, agent, resources):
        while True:
            reply = await host.handle(P.PREPARE, ctl(op_id))
            assert isinstance(reply, PrepareReply), reply
            if reply.status == "ready":
                break
            await clock.sleep(0.01)
    commits = [await h.handle(P.COMMIT, ctl(op_id)) for h in (agent, policy, resources)]
    for host in (resources, policy, agent):
        assert isinstance(await host.handle(P.RESUME, ctl(op_id)), ResumeReply)
    return commits


async def test_executions_run_park_and_complete_on_the_virtual_clock() -> None:
    async def run(seed: int) -> tuple[list[str], float, int]:
        clock = VirtualClock(seed=seed)
        completions: list[Receipt] = []

        async def main() -> tuple[list[str], float, int]:
            hosts = _fleet(clock, completions)
            agent = hosts[1]
            continuations = 0
            async with clock.task_group() as tg:
                for host in hosts:
                    tg.start_soon(host.run)
                for i in range(6):
                    begin = BeginRequest(rollout_id=f"r{i}", attempt=0, group_id="g", turns=4)
                    reply = await agent.handle(P.BEGIN, begin)
                    assert isinstance(reply, ExecutionReply) and reply.state == "running"
                await clock.sleep(0.15)  # executions are mid-turn
                commits = await _checkpoint(clock, hosts, CK1)
                agent_commit = commits[0]
                assert isinstance(agent_commit, CommitReply)
                assert agent_commit.status == "committed"
                continuations = len(agent_commit.continuations)
                # After resume everything finishes; ACK releases every result.
                while len(completions) < 6:
                    await clock.sleep(0.1)
                ack = await agent.handle(P.ACK, AckRequest(receipts=tuple(completions)))
                assert not isinstance(ack, ErrorReply) and len(ack.acknowledged) == 6
                status = await agent.handle(P.STATUS)
                assert isinstance(status, StatusReply)
                assert status.live_executions == 0 and status.completed_unacknowledged == 0
                for host in hosts:
                    host.stop()
            return sorted(r.receipt for r in completions), clock.now(), continuations

        return await clock.run(main)

    first = await run(11)
    assert first[2] >= 1  # the checkpoint caught work in flight, saved at a boundary
    assert await run(11) == first  # same seed, same run
    assert await run(12) != first


async def test_policy_call_held_as_waiter_freezes_the_execution() -> None:
    clock = VirtualClock(seed=21)
    completions: list[Receipt] = []

    async def main() -> None:
        hosts = _fleet(clock, completions)
        policy, agent, resources = hosts
        async with clock.task_group() as tg:
            for host in hosts:
                tg.start_soon(host.run)
            await policy.handle(P.PREPARE, ctl(CK1))  # policy paused: new calls wait
            begin = BeginRequest(rollout_id="r0", attempt=0, group_id="g", turns=2)
            await agent.handle(P.BEGIN, begin)
            await clock.sleep(1.0)
            execution = agent.state.role.find(("r0", 0))  # type: ignore[union-attr]
            assert execution is not None and execution.state.value == "frozen"
            reply = await agent.handle(P.PREPARE, ctl(CK1))
            assert isinstance(reply, PrepareReply) and reply.status == "ready"
            assert reply.frozen == 1
            await resources.handle(P.PREPARE, ctl(CK1))
            # abort in resume order: the held call proceeds and the rollout completes
            for host in (resources, policy, agent):
                await host.handle(P.RESUME, ctl(CK1))
            while not completions:
                await clock.sleep(0.1)
            for host in hosts:
                host.stop()
        assert [r.rollout_id for r in completions] == ["r0"]

    await clock.run(main)


async def test_resources_mutations_wait_while_frozen() -> None:
    clock = VirtualClock(seed=31)

    async def main() -> None:
        res = ParticipantHost.start({"name": "res", "role": "resources"}, clock=clock)
        done: list[float] = []

        async def mutate() -> None:
            await res.mutate("m1", "r0")
            done.append(clock.now())

        await res.handle(P.PREPARE, ctl(CK1))
        async with clock.task_group() as tg:
            tg.start_soon(mutate)
            await clock.sleep(10.0)
            assert done == []  # frozen: held as a waiter
            await res.handle(P.RESUME, ctl(CK1))
        assert len(done) == 1 and done[0] >= 10.0

    await clock.run(main)


async def test_crash_kills_executions_and_fails_held_calls() -> None:
    clock = VirtualClock(seed=41)

    async def main() -> None:
        policy = ParticipantHost.start({"name": "pol", "role": "policy"}, clock=clock)
        await policy.handle(P.PREPARE, ctl(CK1))
        failures: list[str] = []

        async def call() -> None:
            try:
                await policy.generate("c1")
            except HostStopped as error:
                failures.append(error.participant)

        async with clock.task_group() as tg:
            tg.start_soon(call)
            await clock.sleep(1.0)
            policy.crash()
        assert failures == ["pol"]
        assert not policy.alive

    await clock.run(main)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_file_journal_round_trips(tmp_path: Path, anyio_backend: str) -> None:
    journal = FileJournal(tmp_path / "state")
    host = ParticipantHost.start(
        {"name": "p", "role": "policy"}, clock=RealClock(), journal=journal
    )
    await host.handle(P.PREPARE, ctl(CK1))
    await host.handle(P.RESUME, ctl(CK1))
    loaded = journal.load()
    assert loaded is not None and str(loaded.high_watermark) == CK1
    assert not list((tmp_path / "state").glob(".*.tmp"))


@pytest.mark.parametrize("server", ["policy", "resources"])
async def test_an_agent_crash_mid_call_lets_the_server_become_ready(server: str) -> None:
    # The dead agent's call is cancelled mid-flight: the server still ends it, so its next
    # prepare is ready long before the call would have finished (10 s).
    clock = VirtualClock(seed=51)
    slow = WorkConfig(policy_latency_s=(10.0, 10.0), mutation_latency_s=(10.0, 10.0))
    fast = WorkConfig(policy_latency_s=(0.01, 0.01), mutation_latency_s=(0.01, 0.01))

    async def main() -> None:
        policy = ParticipantHost.start(
            {"name": "policy-0", "role": "policy"},
            clock=clock,
            work=slow if server == "policy" else fast,
        )
        resources = ParticipantHost.start(
            {"name": "res-0", "role": "resources"},
            clock=clock,
            work=slow if server == "resources" else fast,
        )
        agent = ParticipantHost.start({"name": "agent-0", "role": "agent"}, clock=clock)
        agent.connect(policies=[HostRef(policy)], resources=[HostRef(resources)])
        target = policy if server == "policy" else resources
        async with clock.task_group() as tg:
            for host in (policy, resources, agent):
                tg.start_soon(host.run)
            begin = BeginRequest(rollout_id="r0", attempt=0, group_id="g", turns=2)
            await agent.handle(P.BEGIN, begin)
            await clock.sleep(1.0)
            assert target.state.role.summary(True)[0] == "accepting"
            busy = await target.handle(P.PREPARE, ctl(CK1))
            assert isinstance(busy, PrepareReply) and busy.status == "not_ready"
            crashed_at = clock.now()
            agent.crash()
            for _ in range(100):
                reply = await target.handle(P.PREPARE, ctl(CK1))
                assert isinstance(reply, PrepareReply)
                if reply.status == "ready":
                    break
                await clock.sleep(0.01)
            assert reply.status == "ready" and clock.now() - crashed_at < 1.0
            policy.stop()
            resources.stop()

    await clock.run(main)


async def test_an_agent_crash_while_its_call_is_held_lets_the_policy_pause_after_resume() -> None:
    # The call waits as a waiter when the agent dies; the resume admits it, and the host
    # ends it at once (nobody is left to run it), so the next prepare is ready.
    clock = VirtualClock(seed=52)

    async def main() -> None:
        policy = ParticipantHost.start({"name": "policy-0", "role": "policy"}, clock=clock)
        agent = ParticipantHost.start({"name": "agent-0", "role": "agent"}, clock=clock)
        agent.connect(policies=[HostRef(policy)])
        async with clock.task_group() as tg:
            tg.start_soon(policy.run)
            tg.start_soon(agent.run)
            await policy.handle(P.PREPARE, ctl(CK1))  # paused: the call will be held
            begin = BeginRequest(rollout_id="r0", attempt=0, group_id="g", turns=2)
            await agent.handle(P.BEGIN, begin)
            await clock.sleep(1.0)
            assert policy.state.role.admission.data.waiters  # type: ignore[union-attr]
            agent.crash()
            await clock.sleep(1.0)
            await policy.handle(P.RESUME, ctl(CK1))  # admits the dead agent's call
            reply = await policy.handle(P.PREPARE, ctl(CK2))
            assert isinstance(reply, PrepareReply) and reply.status == "ready"
            assert policy.state.role.admission.data.in_flight == 0  # type: ignore[union-attr]
            policy.stop()

    await clock.run(main)


def _agent_row(input: AgentInput) -> int:
    return next(i for i, row in enumerate(AGENT_EXECUTION.rows) if row.input is input)


PARKED_AT_BEGIN = ParticipantRules(
    agent=AGENT_EXECUTION.retarget(_agent_row(AgentInput.BEGIN) + 2, ExecState.PARKED)
)
"""A planted agent table: `begin` starts an execution `parked` instead of `running` (row 2,
after the two refusals)."""

HELD_NOT_FROZEN = ParticipantRules(
    agent=AGENT_EXECUTION.retarget(
        _agent_row(AgentInput.POLICY_CALL_HELD), ExecState.PARK_REQUESTED
    )
)
"""A planted agent table: a turn's policy call held by a paused policy leaves the execution
`park_requested` instead of `frozen` (row 10)."""


async def test_the_rules_argument_reaches_every_pure_call_of_the_host() -> None:
    # A host given planted rules answers by them (also once recovered from its journal,
    # and on the data plane); a host given none answers by the protocol's.
    assert AGENT_EXECUTION.rows[_agent_row(AgentInput.BEGIN) + 2].target is ExecState.RUNNING
    clock = VirtualClock(seed=31)

    async def begin(host: ParticipantHost, rollout_id: str) -> str:
        request = BeginRequest(rollout_id=rollout_id, attempt=0, group_id="g", turns=2)
        reply = await host.handle(P.BEGIN, request)
        assert isinstance(reply, ExecutionReply)
        return reply.state

    async def main() -> None:
        config = {"name": "agent-0", "role": "agent"}
        plain = ParticipantHost.start(config, clock=clock, run_work=False)
        assert plain.rules is PARTICIPANT_RULES
        assert await begin(plain, "r0") == "running"
        journal = MemoryJournal()
        host = ParticipantHost.start(
            config, clock=clock, journal=journal, run_work=False, rules=PARKED_AT_BEGIN
        )
        assert await begin(host, "r0") == "parked"
        for op in (P.PREPARE, P.RESUME):  # something durable: the journal is written
            await host.handle(op, ctl(CK1))
        host.crash()
        again = ParticipantHost.recover(journal, "inc-2", clock=clock, rules=PARKED_AT_BEGIN)
        assert again.rules is PARKED_AT_BEGIN and await begin(again, "r1") == "parked"
        reopened = ParticipantHost.open(config, journal, clock=clock, rules=PARKED_AT_BEGIN)
        assert reopened.rules is PARKED_AT_BEGIN

        # The data plane: the paused policy holds the execution's turn call.
        policy = ParticipantHost.start({"name": "policy-0", "role": "policy"}, clock=clock)
        agent = ParticipantHost.start(
            {"name": "agent-1", "role": "agent"}, clock=clock, rules=HELD_NOT_FROZEN
        )
        agent.connect(policies=[HostRef(policy)])
        async with clock.task_group() as tg:
            for each in (policy, agent):
                tg.start_soon(each.run)
            await policy.handle(P.PREPARE, ctl(CK1))  # policy paused: new calls wait
            assert await begin(agent, "r2") == "running"
            await clock.sleep(1.0)
            execution = agent.state.role.find(("r2", 0))  # type: ignore[union-attr]
            assert execution is not None and execution.state is ExecState.PARK_REQUESTED
            for each in (policy, agent):
                each.stop()

    await clock.run(main)


def test_an_in_memory_fleet_runs_every_host_by_its_rules_restarts_included() -> None:
    fleet = InMemoryFleet(VirtualClock(seed=32), agents=1, resources=0, rules=PARKED_AT_BEGIN)
    assert all(host.rules is PARKED_AT_BEGIN for host in fleet.hosts.values())
    assert fleet.crash_restart("agent-0").rules is PARKED_AT_BEGIN
    assert InMemoryFleet(VirtualClock(seed=33)).hosts["agent-0"].rules is PARTICIPANT_RULES
