"""The conformance kit's hypothesis state machine: the rules, i.e. the wire operations a
sequence is made of, and how each resolves its drawn target and key against the example.

What lives here: `ConformanceMachine`, `JudgedExample` with its rules (fence operations for
every role; `begin`, `boundary`, `finish`, `ack` and `retire` for agents; concurrent
duplicates, races, replays and restarts; malformed and unauthenticated requests). What it
does not know: how a reply is judged (`_judge`, `_projection`) or how a run is set up or
reported (`_kit`, `_results`).
"""

from __future__ import annotations

import base64
import time
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition

from quiesce.protocol.machines import FenceState
from quiesce.protocol.participant import (
    AgentRole,
    ParticipantState,
    SavedTurn,
    from_journal,
    handle,
    journal_of,
)
from quiesce.testing._coverage import rows_fired
from quiesce.testing._judge import JudgedExample
from quiesce.testing._program import recorded_rule
from quiesce.testing._projection import allowed_failure
from quiesce.testing._race import (
    RACE_DEADLINE_S,
    explanations,
    order_free,
    race_note,
    recoveries,
)
from quiesce.testing._requests import (
    AGENT_OPS,
    BAD_DIGEST,
    CONTROL_OPS,
    DEADLINE_AT,
    DUPLICATED_OPS,
    KEYS,
    TARGETS,
    Key,
    post_ops,
    valid_body,
)
from quiesce.testing._results import RESTART_METHOD, ConformanceSetupError, KitStep
from quiesce.testing._rules import (
    INCARNATION_RULE,
    RACE_RULE,
    RESTART_RULE,
    describe_differences,
    hint,
)
from quiesce.testing._session import Abort
from quiesce.testing._shapes import EXECUTION_TARGETS, RaceShape, released_shape, shape_of
from quiesce.testing._wire import OPERATIONS, Exchange, ServerUnreachable

__all__ = ["DEADLINE_AT", "ConformanceMachine"]

SCENARIOS = (
    "execution_lifecycle",
    "checkpoint_with_continuation",
    "restore_snapshot",
    "discard_restored",
    "claim",
)
"""The multi-request scenarios of the rule `scenario`, each a method of the same name."""

LEVELS = ("turn", "rollout", "other_turn")
"""How `claim` begins the next attempt of a restored continuation."""

ENDINGS = (
    "ack_twice",
    "ack_unknown",
    "ack_then_unknown",
    "ack_then_retire",
    "ack_then_begin",
    "retire_then_ack",
    "retire_then_finish",
    "begin_retired",
)
"""How `execution_lifecycle` ends an execution: ACKed with its exact receipt, then ACKed
again (already acked) or with a wrong receipt (unknown), retired (already retired) or begun
again (stale attempt); ACKed while it runs and with a wrong receipt once completed (unknown
both times, nothing released), then the exact one; retired once completed (held: only an
ACK releases it), then ACKed; retired while it runs, then reported finished and at a
boundary (late events, dropped); or never begun: attempt 1 retired, then attempt 0 begun
(a key at or below a retired one is stale)."""

_RESTART = Exchange(RESTART_METHOD, "(restart hook)", None, 0, "restarted")


def _drives_executions(self: ConformanceMachine) -> bool:
    return self.run.executions


def _agent(self: ConformanceMachine) -> bool:
    return self.run.agent


def _not_agent(self: ConformanceMachine) -> bool:
    return not self.run.agent


def _has_post_ops(self: ConformanceMachine) -> bool:
    return bool(post_ops(self.run))


class ConformanceMachine(JudgedExample):
    """One example: setup, then generated operations, each compared with the oracle."""

    def _id(self, at: str | int, kind: str) -> str:
        if at == "active":
            data = self.oracle.fence.data
            current = data.active or data.high_watermark or self.base
            seq = current.seq
        elif at == "next":
            seq = self.top + 1
        else:
            assert isinstance(at, int)
            seq = self.base.seq + at
        self.top = max(self.top, seq)
        if seq not in self.texts:
            self.texts[seq] = f"{kind}-{self.base.epoch}-{seq}-step{seq}"
        return self.texts[seq]

    def _key(self, index: int) -> Key:
        """Execution key `index` (-1: the most recently begun one)."""
        chosen = self.latest if index < 0 else index
        return (f"{self.prefix}-r{chosen // 2}", chosen % 2)

    # ------------------------------------------------------------------ fence rules

    @recorded_rule()
    def pause(self) -> None:
        """Send nothing. The rule hypothesis shrinks towards (it has no arguments, so it sorts
        first): a needless request in a failing sequence becomes a pause, and the printed
        sequence keeps only the requests that matter."""

    def _control(self, at: str | int, kind: str = "ck") -> dict[str, Any]:
        return {"op_id": self._id(at, kind), "deadline_at": DEADLINE_AT}

    @recorded_rule(at=TARGETS)
    def prepare(self, at: str | int) -> None:
        self._op("prepare", self._control(at))

    @recorded_rule(at=TARGETS)
    def commit(self, at: str | int) -> None:
        self._op("commit", self._control(at))

    @recorded_rule(at=TARGETS)
    def resume(self, at: str | int) -> None:
        self._op("resume", self._control(at))

    @recorded_rule(at=TARGETS, source=st.integers(0, 3), intact=st.booleans())
    def restore(self, at: str | int, source: int, intact: bool) -> None:
        server, oracle = self._restore_bodies(at, source, intact)
        self._op("restore", server, oracle_body=oracle)

    def _restore_bodies(
        self, at: str | int, source: int, intact: bool
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A restore of a snapshot committed in this example (`intact`: with each side's own
        artifact and digest) or of a corrupt artifact: the server's body, the oracle's."""
        body = self._control(at, "rs")
        if intact and self.commits:
            snapshot = self.commits[source % len(self.commits)]
            common = {**body, "snapshot_id": snapshot.op_id}
            server = {
                **common,
                "artifact": snapshot.server[0],
                "expected_digest": snapshot.server[1],
            }
            oracle = {
                **common,
                "artifact": snapshot.oracle[0],
                "expected_digest": snapshot.oracle[1],
            }
            return server, oracle
        named = self.commits[source % len(self.commits)].op_id if self.commits else str(self.base)
        corrupt = base64.b64encode(b"not the artifact of this snapshot").decode("ascii")
        bad = {**body, "snapshot_id": named, "artifact": corrupt, "expected_digest": BAD_DIGEST}
        return bad, bad

    @recorded_rule(
        op=st.sampled_from(DUPLICATED_OPS),
        at=TARGETS,
        source=st.integers(0, 3),
        intact=st.booleans(),
    )
    def concurrent_duplicate(self, op: str, at: str | int, source: int, intact: bool) -> None:
        """The same control request twice at once (a retry racing its original); `source`
        and `intact` choose a restore's snapshot, as for `restore`."""
        if op == "restore":
            server, oracle = self._restore_bodies(at, source, intact)
        else:
            server = oracle = self._control(at)
        self._op(op, server, oracle_body=oracle, copies=2)

    @recorded_rule()
    def checkpoint(self) -> None:
        """Three requests: prepare a fresh id, commit it, and send the prepare again (a
        controller's retry of a prepare whose reply was lost, arriving after the commit: it
        is answered from the record). Random single steps rarely name the same id twice in
        a row, and a fence past `prepared` is where replays (and the phases after commit)
        are judged."""
        self.prepare("next")
        self.commit("active")
        self.replay(index=1)  # the prepare, sent before the commit

    @precondition(lambda self: bool(self.sent))
    @recorded_rule(index=st.integers(0, 7))
    def replay(self, index: int) -> None:
        """Send an earlier control request of this example again, unchanged (a controller's
        retry arriving after the fence moved on: answered from the record, or refused)."""
        op, body, oracle_body = self.sent[-1 - index % len(self.sent)]
        self._op(op, body, oracle_body=oracle_body)

    @recorded_rule(base=st.integers(0, 255), order=st.sampled_from((0, 0, 0, 0, 0, 1, 2, 3, 4, 5)))
    def race(self, base: int, order: int) -> None:
        """Different control requests in flight at once, the race generated from the tables
        (`_shapes`: a request that can be pending, with what can overtake or release it),
        `base` picking which and `order` the order of sending (0, the most frequent: the
        pending one first); judged by linearizability: some order of the overlapping
        requests must explain every reply and the state after."""
        self._race(shape_of(self.run.role, self.run.executions, base, order))

    @recorded_rule(base=st.integers(0, 255))
    def overtaken_then_released(self, base: int) -> None:
        """A race of three, sent in this order: a request that can be pending (a prepare an
        execution blocks), one that overtakes it (a resume of its id), then an event that
        releases it (a boundary, finish, retire or ACK of that execution, or the next
        prepare): a server that decides a long poll only when released must not then act
        on the fence that moved on (`_shapes.released_shape`)."""
        self._race(released_shape(self.run.role, self.run.executions, base))

    def _race(self, shape: RaceShape) -> None:
        """Bring the participant to where `shape`'s pending request can be pending, build the
        bodies (pending first: `same` is its id), send them overlapping in the shape's order
        of sending, and judge the replies and the state after."""
        self._set_up_race(*shape.requests[0])
        bodies: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for op, at in shape.requests:
            bodies.append(self._race_bodies(op, at, bodies[0][1] if bodies else None))
        requests = [(op, bodies[i][0]) for i, (op, _) in zip(shape.order, shape.sent, strict=True)]
        oracle_requests = [
            (op, bodies[i][1]) for i, (op, _) in zip(shape.order, shape.sent, strict=True)
        ]
        self._stop_if_asked()
        try:
            answers = self.client.send_overlapping(requests)
        except ServerUnreachable as error:
            self._unreachable(error, requests[0][1])
        self.run.races += 1
        actual = [
            self._actual(op, t.exchange) for (op, _), t in zip(requests, answers, strict=True)
        ]
        found, tried = explanations(
            self.oracle, oracle_requests, answers, actual, self._expect, self._allowed_in_race
        )
        shown = found[0] if found else tried[0]
        for i, timed in enumerate(answers):  # in send order, each with what it overlapped
            note = race_note(i, answers)
            self.steps.append(KitStep(timed.exchange, shown.expected[i], actual[i], note=note))
        self.last, self.shape = "race", "|".join(op for op, _ in shape.sent)
        self.raced_rows = tuple(
            row for i in shown.order for row in rows_fired(shown.before[i], *oracle_requests[i])
        )
        if not found:
            alone = order_free(tried, actual, answers)
            wrong = (
                alone
                if alone is not None
                else max(i for i in range(len(actual)) if actual[i] != shown.expected[i])
            )
            op, body = oracle_requests[wrong]
            self.failing = (shown.before[wrong], op, body)
            expected, got = shown.expected[wrong], actual[wrong]
            differences = describe_differences(expected, got)
            if alone is None:
                self._fail(RACE_RULE, differences)
            # A sequential difference reached inside a race: every order expects the same of
            # this request, so no order could explain it; its own rule is the one it breaks.
            where = f"{op} (raced request {wrong + 1}: every order of the race expects this)"
            self._fail(hint(op, expected, got, "race"), (*differences, where))
        self._judge_race_state(found, oracle_requests)

    def _execution_to_race(self, kind: str) -> None:
        """Begin a fresh execution (and finish it, for `completed`): what a raced retire or
        ACK of `latest` then names."""
        self.begin(-1, 2, 0)
        if kind == "completed":
            self.finish(-1, 1)

    def _set_up_race(self, op: str, at: str) -> None:
        """Bring the participant to where `op` at `at` can be pending: an idle fence for a
        fresh prepare or restore (a snapshot of this example for the restore), a prepared one
        for a commit; and the execution a prepare at `running` or `completed` waits on."""
        if op == "restore" and not self.commits:
            self.checkpoint()
        if op == "commit" and self.oracle.fence.state is FenceState.PREPARED:
            return
        if self.oracle.fence.state is not FenceState.IDLE:
            self.resume("active")  # else the fresh request is refused, and nothing races it
        if op == "commit":
            self.prepare("next")
        if self.run.executions and at in EXECUTION_TARGETS:
            self._execution_to_race(at)

    def _race_bodies(
        self, op: str, at: str, pending: dict[str, Any] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A raced request's body for the server and for the oracle (an ACK quotes each
        side's own receipt, a restore each side's own snapshot); `same` is the `pending`
        request's op id, and a control request at an execution target a fresh one."""
        rollout_id, attempt = self._key(-1)
        key = {"rollout_id": rollout_id, "attempt": attempt}
        if op == "retire":
            return key, key
        if op == "boundary":
            body = {**key, "turn": 1}
            return body, body
        if op == "finish":
            body = {**key, "result": {"reward": 1}}
            return body, body
        if op == "ack":
            quoted = {
                side: self.receipts.of(side, (rollout_id, attempt)) or "none"
                for side in ("server", "oracle")
            }
            server, oracle = ({"receipts": [{**key, "receipt": quoted[side]}]} for side in quoted)
            return server, oracle
        if at in EXECUTION_TARGETS:
            at = "next"
        op_id = pending["op_id"] if at == "same" and pending else self._id(at, "ck")
        if op == "restore":
            server, oracle = self._restore_bodies(at, 0, True)
            return {**server, "op_id": op_id}, {**oracle, "op_id": op_id}
        if op == "discard":
            rollout_id, attempt = self._continuation(0)
            body = {"op_id": op_id, "rollout_id": rollout_id, "attempt": attempt}
            return body, body
        body = {"op_id": op_id, "deadline_at": time.time() + RACE_DEADLINE_S}
        return body, body

    @precondition(lambda self: self.run.restart is not None)
    # Mostly between requests; shrinking prefers that (None comes first): a kill during a
    # request may or may not beat the reply, so a failure is shrunk towards a deterministic
    # kill when one shows it too.
    @recorded_rule(
        during=st.sampled_from((None, None, "prepare", "commit", "resume", "pending_prepare")),
        at=TARGETS,
    )
    def restart(self, during: str | None, at: str | int) -> None:
        """Kill and restart the server (§6): it must come back under a new incarnation with
        exactly what its journal must keep (`journal_of` of the oracle), so everything
        replied before the kill holds after it; recorded results replay unchanged later.
        With `during`, the kill comes while that request is in flight (`_restart_during`);
        `pending_prepare`: while a prepare that is not ready long-polls (a fresh id, sent
        while an execution runs, with a near deadline)."""
        assert self.run.restart is not None
        if during == "pending_prepare":
            if self.oracle.fence.state is not FenceState.IDLE:
                self.resume("active")
            if self.run.executions:
                self._execution_to_race("running")
            self._restart_during("prepare", "next", time.time() + RACE_DEADLINE_S)
            return
        if during is not None:
            self._restart_during(during, at)
            return
        before = self.run.capabilities.incarnation if self.run.capabilities else ""
        self.run.restarts += 1
        self._restart_server()
        self._rediscover()
        assert self.run.capabilities is not None
        incarnation = self.run.capabilities.incarnation
        self._restarted("the kit killed and restarted the server", before, incarnation)
        self.oracle = from_journal(journal_of(self.oracle), incarnation, self.run.rules)
        self._check_state()

    def _restart_during(self, op: str, at: str | int, deadline_at: float = DEADLINE_AT) -> None:
        """Kill and restart the server while `op` is in flight (§6): a reply that came must be
        durable; without one, `op` took effect before the kill or never did (the state read
        after says which), and re-sending it then gets the recorded reply or runs it now.
        A reply under the new incarnation means the request reached the server only after
        the restart (uvicorn read it late): it ran on the recovered participant."""
        assert self.run.restart is not None and self.run.capabilities is not None
        before, body = self.oracle, {**self._control(at), "deadline_at": deadline_at}
        killed = self.run.capabilities.incarnation
        self.sent.append((op, body, body))
        exchange = self.client.send_while(op, body, self._restart_server)
        self.run.restarts += 1
        self._rediscover()
        incarnation = self.run.capabilities.incarnation
        answered = exchange is not None and exchange.status < 500
        if exchange is not None and answered and _incarnation_of(exchange) == incarnation:
            self._restarted("killed while the request below was sent", killed, incarnation)
            self.oracle = from_journal(journal_of(before), incarnation, self.run.rules)
            self._judge_late(op, body, exchange)
            return
        if exchange is not None and answered:
            after = self._judge_answer(before, op, body, exchange)
        else:
            after = handle(before, op, body, rules=self.run.rules)[0]
            method, path = OPERATIONS[op]
            cut = exchange or Exchange(method, path, body, 0, "no answer")
            self.steps.append(KitStep(cut, note="no answer: the kill below cut it"))
        self._restarted("killed while the request above was in flight", killed, incarnation)
        self._judge_recovered(recoveries(before, after, answered, incarnation, self.run.rules))
        if not answered:
            self._op(op, body)

    def _restart_server(self) -> None:
        """Run the restart hook. A hook that fails (a command exiting non-zero or running
        over the timeout) ends the run with its `ConformanceSetupError`: hypothesis must not
        take a broken rig for a failure of the sequence and replay it."""
        assert self.run.restart is not None
        try:
            self.run.restart()
        except ConformanceSetupError as error:
            self.run.setup_error = error
            raise Abort(error) from None

    def _rediscover(self) -> None:
        """Learn who answers after the kit's own restart. The hook has returned, so the
        server must be back: one that does not answer discovery is a violation of this
        sequence (replayed and shrunk like any other), not a setup error."""
        try:
            self.run.connect(self.run.target)
        except ConformanceSetupError as error:
            self.steps.append(KitStep(_RESTART, note="the kit killed and restarted the server"))
            self._fail(RESTART_RULE, (f"the server did not come back after restart: {error}",))

    def _restarted(self, note: str, killed: str, incarnation: str) -> None:
        """Show the restart in the report (`note`: when it came); the server must be back
        under a new incarnation (§6)."""
        self.steps.append(KitStep(_RESTART, note=note))
        self.failing, self.shape, self.raced_rows = None, "restart", ()
        if incarnation == killed:
            self._fail(INCARNATION_RULE, (f"incarnation: still {killed!r} after the restart",))
        self.last = "restart"

    def _judge_late(self, op: str, body: dict[str, Any], exchange: Exchange) -> None:
        """Judge `exchange`, the reply to `op` that the restarted participant gave, as `op`
        run on the oracle's (recovered) state; then check the state."""
        self.oracle = self._judge_answer(self.oracle, op, body, exchange)
        self.last = op
        self._check_state()

    def _judge_answer(
        self, before: ParticipantState, op: str, body: dict[str, Any], exchange: Exchange
    ) -> ParticipantState:
        """Judge the answer `exchange` to `op` run on `before`; the state it leaves (a
        failure M2 allows leaves the failed operation's state)."""
        after, reply, _ = handle(before, op, body, rules=self.run.rules)
        expected = self._expect(op, reply)
        self.failing, self.shape, self.last_expected = (before, op, body), op, expected
        actual = self._compare(op, exchange, expected)
        if actual != expected and not allowed_failure(op, expected, actual):
            self._fail(hint(op, expected, actual, op), describe_differences(expected, actual))
        if actual != expected:
            after = self._failed(before, op, body)
        self._remember(after, op, body, body, exchange, reply)
        return after

    @recorded_rule(at=TARGETS, key=KEYS)
    def discard(self, at: str | int, key: int) -> None:
        rollout_id, attempt = self._key(key)
        body = {"op_id": self._id(at, "rs"), "rollout_id": rollout_id, "attempt": attempt}
        self._op("discard", body)

    @recorded_rule(
        kind=st.sampled_from(SCENARIOS),
        turns=st.integers(2, 3),
        pick=st.integers(0, 3),
        variant=st.integers(0, len(ENDINGS) - 1),
        intact=st.sampled_from([True, True, True, False]),
    )
    def scenario(self, kind: str, turns: int, pick: int, variant: int, intact: bool) -> None:
        """Several requests that reach a deep state random single steps rarely reach
        (`SCENARIOS`): `turns` of a new execution, `pick` of a snapshot or continuation,
        `variant` of an ending or a claim's level, `intact` of a restore's artifact. One rule
        with five arguments: hypothesis sorts rules by their number of arguments and shrinks
        towards the first, so a failure found through a scenario still shrinks to the
        single requests that cause it where those suffice."""
        executions = kind in ("execution_lifecycle", "checkpoint_with_continuation", "claim")
        if executions and not self.run.executions:
            return
        if kind == "execution_lifecycle":
            self.execution_lifecycle(turns, ENDINGS[variant])
        elif kind == "checkpoint_with_continuation":
            self.checkpoint_with_continuation(turns)
        elif kind == "claim":
            self.claim(pick, LEVELS[variant % len(LEVELS)])
        elif not self.commits:  # a restore needs a snapshot of this example first
            self.checkpoint()
        elif kind == "restore_snapshot":
            self.restore_snapshot(pick, intact, again=variant % 2 == 1)
        else:
            self.discard_restored(pick)

    def restore_snapshot(self, source: int, intact: bool, again: bool) -> None:
        """Up to three requests: release the fence if it is not idle, then restore a fresh id
        from a snapshot committed in this example (mostly intact). Random single steps
        rarely find the fence idle with a snapshot at hand, and a restored fence is where
        restore replays, retries of a failed restore, discards and claims are judged. An
        agent's live executions are parked by the restore (a live restore). `again`: then
        the same restore id with the intact snapshot (a replay of a success, or the retry
        of a failed restore)."""
        if self.oracle.fence.state is not FenceState.IDLE:
            self.resume("active")
        self.restore("next", source, intact)
        if again:
            self.restore("active", source, True)

    def discard_restored(self, pick: int) -> None:
        """Discard a continuation the restore installed (M2 `discard`, under the restore's
        id): the one `pick` names, or, with none installed, the latest execution's."""
        rollout_id, attempt = self._continuation(pick)
        body = {"op_id": self._id("active", "rs"), "rollout_id": rollout_id, "attempt": attempt}
        self._op("discard", body)

    def _restored(self) -> tuple[SavedTurn, ...]:
        role = self.oracle.role
        return role.restored if isinstance(role, AgentRole) else ()

    def _continuation(self, pick: int) -> Key:
        restored = self._restored()
        if restored:
            saved = restored[pick % len(restored)]
            return (saved.rollout_id, saved.attempt)
        return self._key(-1)

    # ------------------------------------------------------------------ agent rules (M3)

    @precondition(_drives_executions)
    # Mostly a fresh start: resume_from_turn > 0 claims a restored continuation, which
    # exists only after a restore, so it is mostly refused (unknown_execution).
    @recorded_rule(key=KEYS, turns=st.integers(1, 3), resume=st.sampled_from([0, 0, 0, 1, 2]))
    def begin(self, key: int, turns: int, resume: int) -> None:
        if key < 0:  # a key never used in this example (begin's -1: a new execution)
            self.fresh_keys += 1
            key = 3 + self.fresh_keys
        rollout_id, attempt = self._key(key)
        self.latest = key
        body = {
            "rollout_id": rollout_id,
            "attempt": attempt,
            "group_id": f"{self.prefix}-g",
            "turns": turns,
            "resume_from_turn": resume,
        }
        self._op("begin", body)

    @precondition(_drives_executions)
    @recorded_rule(turns=st.integers(1, 3), reward=st.integers(0, 2))
    def begin_and_finish(self, turns: int, reward: int) -> None:
        """Three requests: begin a new execution, ACK it while it runs (it has no result
        yet: listed in `unknown`, nothing released, the batch not refused) and finish it.
        Random single steps rarely complete an execution while the fence stays idle, and a
        completed, un-ACKed result is where the ACK/retire rules (S17) bite; they rarely
        ACK a running one either, which is what an agent refusing a whole batch gets
        wrong."""
        self.begin(-1, turns, 0)
        self.ack([(-1, False)])
        self.finish(-1, reward)

    def execution_lifecycle(self, turns: int, ending: str) -> None:
        """One execution from begin to its end, after releasing the fence if it is not idle
        (a closed fence refuses every begin, and random single steps leave it closed most of
        the time): begin, a turn boundary while it runs, then `ending` (`ENDINGS`)."""
        if self.oracle.fence.state is not FenceState.IDLE:
            self.resume("active")
        if ending == "begin_retired":  # retire attempt 1 before it begins, then begin 0
            earlier = 4 + self.fresh_keys + self.fresh_keys % 2  # the next unused even key
            self.fresh_keys = earlier - 2  # keys `earlier` and `earlier + 1` are now used
            self.retire(earlier + 1)
            self.begin(earlier, turns, 0)
            return
        self.begin(-1, turns, 0)
        self.boundary(-1, 1)
        if ending == "ack_unknown":  # no result yet: listed in `unknown`, the batch not refused
            self.ack([(-1, False)])
        if ending == "retire_then_finish":
            self.retire(-1)
            self.finish(-1, 1)
            self.boundary(-1, 2)
            return
        self.finish(-1, 1)
        if ending == "retire_then_ack":  # a completed, un-ACKed result is held (S17)
            self.retire(-1)
        self.ack([(-1, ending != "ack_unknown")])
        if ending in ("ack_twice", "ack_unknown", "ack_then_unknown"):
            self.ack([(-1, ending != "ack_then_unknown")])
        elif ending == "ack_then_retire":
            self.retire(-1)
        elif ending == "ack_then_begin":
            self.begin(self.latest, turns, 0)

    def checkpoint_with_continuation(self, turns: int) -> None:
        """Five requests: begin a new execution, prepare (not ready: it runs), report its
        first turn boundary (it parks), prepare again (ready) and commit: the commit carries
        the parked execution as a continuation, which a restore of it installs. Random
        single steps almost never park an execution before a commit."""
        self.begin(-1, turns, 0)
        self.prepare("next")
        self.boundary(-1, 1)
        self.prepare("active")
        self.commit("active")

    def claim(self, pick: int, level: str) -> None:
        """Begin the next attempt of a restored continuation (`pick` names it; with none
        installed, of the latest execution), after releasing the fence if it is not idle.
        `turn`: resume from its saved turn (the claim; M3: claimed once). `rollout`: discard
        the continuation first, then begin the attempt from turn 0 (a coarser target level).
        `other_turn`: resume from a turn nobody saved (refused unknown_execution)."""
        restored = {(t.rollout_id, t.attempt): t for t in self._restored()}
        key = self._continuation(pick)
        saved = restored.get(key)
        if level == "rollout" and self.oracle.fence.state is FenceState.RESTORED_PAUSED:
            self.discard_restored(pick)
        if self.oracle.fence.state is not FenceState.IDLE:
            self.resume("active")
        turn = 0 if level == "rollout" else (saved.turn if saved else 1)
        body = {
            "rollout_id": key[0],
            "attempt": key[1] + 1,
            "group_id": saved.group_id if saved else f"{self.prefix}-g",
            "turns": saved.turns if saved else 3,
            "resume_from_turn": turn + (level == "other_turn"),
        }
        self._op("begin", body)

    @precondition(_drives_executions)
    @recorded_rule(key=KEYS, turn=st.integers(0, 3))
    def boundary(self, key: int, turn: int) -> None:
        rollout_id, attempt = self._key(key)
        self._op("boundary", {"rollout_id": rollout_id, "attempt": attempt, "turn": turn})

    @precondition(_drives_executions)
    @recorded_rule(key=KEYS, reward=st.integers(0, 2))
    def finish(self, key: int, reward: int) -> None:
        rollout_id, attempt = self._key(key)
        body = {"rollout_id": rollout_id, "attempt": attempt, "result": {"reward": reward}}
        self._op("finish", body)

    @precondition(_agent)
    @recorded_rule(items=st.lists(st.tuples(KEYS, st.booleans()), min_size=1, max_size=3))
    def ack(self, items: list[tuple[int, bool]]) -> None:
        bodies: dict[str, list[dict[str, Any]]] = {"server": [], "oracle": []}
        for index, exact in items:
            key = self._key(index)
            for side, receipts in bodies.items():
                known = self.receipts.of(side, key)
                text = known if exact and known is not None else "not-a-receipt"
                receipts.append({"rollout_id": key[0], "attempt": key[1], "receipt": text})
        self._op("ack", {"receipts": bodies["server"]}, oracle_body={"receipts": bodies["oracle"]})

    @precondition(_agent)
    @recorded_rule(key=KEYS)
    def retire(self, key: int) -> None:
        rollout_id, attempt = self._key(key)
        self._op("retire", {"rollout_id": rollout_id, "attempt": attempt})

    @precondition(_not_agent)
    @recorded_rule(op=st.sampled_from(AGENT_OPS))
    def agent_operation_elsewhere(self, op: str) -> None:
        self._op(op, valid_body(op, self.prefix, self._id("next", "ck")))

    # ------------------------------------------------------------------ hostile requests

    @precondition(_has_post_ops)
    @precondition(lambda self: self.run.over_http)
    @recorded_rule(
        index=st.integers(0, len(CONTROL_OPS) + len(AGENT_OPS) - 1),
        flaw=st.sampled_from(["unknown_field", "wrong_type", "missing_field", "not_json"]),
    )
    def malformed(self, index: int, flaw: str) -> None:
        ops = post_ops(self.run)
        op = ops[index % len(ops)]
        body = valid_body(op, self.prefix, self._id("next", "ck"))
        first = next(iter(body))
        raw = None
        if flaw == "unknown_field":
            body["unexpected_field"] = 1
            bad = "unexpected_field"
        elif flaw == "wrong_type":
            body[first] = {"wrong": "type"}
            bad = first
        elif flaw == "missing_field":
            del body[first]
            bad = first
        else:
            raw, bad = b'{"not json', "<body>"
        expected = {"http": 422, "code": "malformed_request", "field": bad}
        self._expect_refused(self._send(op, body, raw=raw), expected, op)

    @precondition(lambda self: self.run.over_http)
    @recorded_rule(
        op=st.sampled_from(["status", "prepare", "resume"]), auth=st.sampled_from(["none", "wrong"])
    )
    def unauthenticated(self, op: str, auth: str) -> None:
        body = None if op == "status" else self._control("next")
        expected = {"http": 401, "code": "unauthorized"}
        self._expect_refused(self._send(op, body, auth=auth), expected, op)


def _incarnation_of(exchange: Exchange) -> str | None:
    """The incarnation a reply names, if it names one."""
    reply = exchange.reply
    value = reply.get("incarnation") if isinstance(reply, dict) else None
    return value if isinstance(value, str) else None
