"""One example of the conformance kit against the server under test: bringing it to a known
state, sending requests, and judging every reply against the oracle (the module docstring of
`_kit` says what is checked).

What lives here: `JudgedExample`, the hypothesis state machine without its rules: the
example's setup and teardown, the plumbing of sending, and the judging of one operation
(`_op`), of a request that must be refused (`_expect_refused`), of the state read after
each (`_check_state`), and of a race's outcome. What it does not know: which requests a
sequence is made of (`_machine`'s rules), how a reply is projected (`_projection`), or the
words of a rule (`_rules`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, ClassVar, NoReturn

from hypothesis.stateful import RuleBasedStateMachine
from pydantic import ValidationError

from quiesce.adapters import CompletionsReply, Participant, status_of
from quiesce.protocol import InvalidOpId, OpId
from quiesce.protocol.machines import FenceOp
from quiesce.protocol.participant import ParticipantState, handle, new_participant
from quiesce.protocol.wire import ErrorReply, Message
from quiesce.testing._coverage import rows_fired
from quiesce.testing._deviations import Tolerated
from quiesce.testing._latitude import begin_refusals
from quiesce.testing._program import Step
from quiesce.testing._projection import (
    Receipts,
    allowed_failure,
    other_refusal,
    project,
    reply_model,
    without_incarnation,
)
from quiesce.testing._race import Explanation
from quiesce.testing._requests import BAD_DIGEST, DEADLINE_AT, FENCE_OPS, Key, Snapshot
from quiesce.testing._results import (
    ConformanceSetupError,
    ConformanceStopped,
    ConformanceViolation,
    KitStep,
    brief,
)
from quiesce.testing._rules import (
    CODE_RULES,
    DUPLICATE_RULE,
    RACE_RULE,
    REPLAY_RULE,
    SETUP_RULE_ID,
    UNREACHABLE_RULE,
    Rule,
    describe_differences,
    describe_disagreement,
    hint,
    section_of,
    step_note,
)
from quiesce.testing._session import Abort, KitRun
from quiesce.testing._wire import Exchange, ServerUnreachable, WireClient

__all__ = ["JudgedExample"]


class JudgedExample(RuleBasedStateMachine):
    """One example: setup, then operations (the subclass's rules), each compared with the oracle."""

    run: ClassVar[KitRun]

    def __init__(self) -> None:
        super().__init__()
        run = self.run
        run.examples += 1
        self.prefix = f"{run.nonce}-{run.examples}"
        self.steps: list[KitStep] = []
        self.begun: set[Key] = set()
        self.receipts = Receipts()
        self.replies: dict[tuple[str, str], Any] = {}
        self.commits: list[Snapshot] = []
        self.sent: list[tuple[str, Any, Any]] = []  # control requests, for `replay`
        self.texts: dict[int, str] = {}
        self.last = "setup"
        self.last_expected: dict[str, Any] = {}  # the oracle's projection of `last`'s reply
        self.failing: tuple[ParticipantState, str, Any] | None = None  # what rows name
        self.shape = ""  # where a failure now is: the operation, or a race's shape
        self.raced_rows: tuple[str, ...] = ()  # a race's rows, every request's
        self.latest = 0
        self.fresh_keys = 0
        self.program: list[Step] = []  # the top-level rule calls (`_program.recorded_rule`)
        self.depth = 0
        self.ended = False  # a tolerated difference the oracle cannot follow ended it
        self.context: AbstractContextManager[Any] | None = None
        if not isinstance(run.server, str | Participant):
            self.context = run.server()
            started = self.context.__enter__()
        try:
            if self.context is not None:
                run.connect(started)
            elif run.reset is not None:
                run.fresh_participant()
            assert run.config is not None and run.capabilities is not None
            self.oracle = new_participant(run.config, run.capabilities.incarnation)
            self.base = self._setup()
        except BaseException as error:
            self._stop()  # hypothesis calls teardown only on a machine that was built
            if isinstance(error, ConformanceSetupError):
                run.setup_error = error
                raise Abort(error) from None
            raise
        self.top = self.base.seq

    def _stop(self) -> None:
        if self.context is not None:
            self.run.disconnect()
            self.context.__exit__(None, None, None)
            self.context = None

    # ------------------------------------------------------------------ plumbing

    @property
    def client(self) -> WireClient:
        assert self.run.client is not None
        return self.run.client

    def _send(self, op: str, body: Any = None, **options: Any) -> Exchange:
        self._stop_if_asked()
        try:
            return self.client.send(op, body, **options)
        except ServerUnreachable as error:
            self._unreachable(error, body)

    def _send_together(self, op: str, body: Any, copies: int) -> tuple[Exchange, ...]:
        self._stop_if_asked()
        try:
            return self.client.send_together(op, body, copies=copies)
        except ServerUnreachable as error:
            self._unreachable(error, body)

    def _stop_if_asked(self) -> None:
        # Between requests, never inside one: an exception raised from a signal handler
        # can land in a library's cleanup and be swallowed there.
        if self.run.stop is not None and self.run.stop.is_set():
            raise ConformanceStopped(self.run.url)

    def _unreachable(self, error: ServerUnreachable, body: Any) -> NoReturn:
        self.steps.append(KitStep(Exchange(error.method, error.path, body, 0, error.detail)))
        self._fail(UNREACHABLE_RULE, (str(error),))

    def _fail(
        self, rule: Rule, differences: tuple[str, ...], *, after: ParticipantState | None = None
    ) -> NoReturn:
        """Report a violation at the last step; `after`: the oracle's state once the failing
        request is applied, which the server's state is then read and compared with. The
        violation names the rows the reference fired for the request judged last."""
        state_diff = () if after is None else self._state_diff(after)
        rows = () if self.failing is None else rows_fired(*self.failing)
        rows += tuple(row for row in self.raced_rows if row not in rows)
        violation = ConformanceViolation(
            rule.text,
            differences,
            tuple(self.steps),
            section_of(rule.text),
            state_diff,
            rule_id=rule.id,
            shape=self.shape,
            rows=rows,
        )
        if self.depth > 0 and self.run.excuse(violation):  # inside a rule: step past it
            raise Tolerated(self._resync(after))
        self.run.found(violation, tuple(self.program))
        raise violation

    def _resync(self, after: ParticipantState | None) -> bool:
        """After a tolerated difference: if the server's state (read now) is the oracle's
        before the request judged last, or after it, the oracle takes it and the example
        goes on (True); else the example ends (False)."""
        candidates = [s for s in (after, self.oracle) if s is not None]
        if self.failing is not None:
            candidates.append(self.failing[0])
        try:  # the client itself: `_send` would report an unreachable server as a violation
            reads = [self.client.send(op) for op in self._state_queries()]
        except ServerUnreachable:
            return False
        actual = [
            project(op, e.status, e.reply, "server", self.receipts)
            for op, e in zip(self._state_queries(), reads, strict=True)
        ]
        for state in candidates:
            if [x for _, x in self._expected_state(state)] == actual:
                self.oracle = state
                return True
        return False

    def _state_diff(self, after: ParticipantState) -> tuple[str, ...]:
        """How the state the server reports after a wrong reply differs from the oracle's
        (`status`, and `completions` for agents), field by field; a diagnosis only: the read
        is not a step of the sequence, and an unreachable server leaves it empty."""
        try:  # the client itself: `_send` would report an unreachable server as a violation
            reads = [self.client.send(op) for op in self._state_queries()]
        except ServerUnreachable:
            return ()
        diff: list[str] = []
        for (op, expected), exchange in zip(self._expected_state(after), reads, strict=True):
            actual = project(op, exchange.status, exchange.reply, "server", self.receipts)
            diff += [f"{op}.{d}" for d in describe_differences(expected, actual)]
        return tuple(diff)

    def _setup_failed(self, rule: str, differences: tuple[str, ...]) -> NoReturn:
        """The server cannot be brought to a known state. A fresh server per example: a
        plain violation. A shared one: the previous sequence left it stuck, so report that
        sequence and stop (shorter sequences cannot be replayed against a stuck server)."""
        if self.context is not None:
            self._fail(Rule(SETUP_RULE_ID, rule), differences)
        steps = (*self.run.previous, *self.steps)
        violation = ConformanceViolation(
            f"{rule} (after the previous sequence)",
            differences,
            steps,
            section_of(rule),
            rule_id=SETUP_RULE_ID,
            shape="setup",
        )
        self.run.found(violation)
        self.run.stuck = True
        raise Abort(violation)

    def _query(self, op: str) -> Any:
        """A setup read (status, completions), parsed; a bad answer is a violation."""
        exchange = self._send(op)
        self.steps.append(KitStep(exchange, setup=True, check=True))
        try:
            return reply_model(op, 200).model_validate(exchange.reply)
        except ValidationError as error:
            self._setup_failed(
                f"setup: {op} must answer 200 with its reply model",
                (f"got {exchange.status}: {str(error).splitlines()[0]}",),
            )

    def _setup(self) -> OpId:
        status = self._query("status")
        if status.fence != "idle":
            active = None if status.active_id is None else str(status.active_id)
            body = {"op_id": active, "deadline_at": DEADLINE_AT}
            exchange = self._send("resume", body)
            self.steps.append(KitStep(exchange, setup=True))
            if exchange.status != 200:
                self._setup_failed(
                    "setup: resume of the active id must bring the fence back to idle (M2)",
                    (f"resume({body['op_id']}) answered {exchange.status}",),
                )
        if self.run.agent:
            held = self._query("completions").receipts
            if held:
                acks = {"receipts": [r.model_dump(mode="json") for r in held]}
                self.steps.append(KitStep(self._send("ack", acks), setup=True))
        status = self._query("status")
        if status.fence != "idle" or status.live_executions or status.completed_unacknowledged:
            self._setup_failed(
                "setup: the server must come back to an idle fence with nothing live",
                (
                    f"fence {status.fence}, {status.live_executions} live executions, "
                    f"{status.completed_unacknowledged} completed un-ACKed; the kit needs the "
                    "server to itself, and an agent that does not run executions on its own "
                    "(quiesce serve --no-work, or check with executions=False)",
                ),
            )
        mark = status.high_watermark
        fresh = OpId(mark.epoch, mark.seq + 1, mark.seq + 1) if mark else OpId(1, 1, 1)
        self.texts[fresh.seq] = str(fresh)
        self.last = "setup"
        self._op("resume", {"op_id": str(fresh), "deadline_at": DEADLINE_AT}, setup=True)
        return fresh

    # ------------------------------------------------------------------ judging

    def _expect(self, op: str, reply: Message) -> dict[str, Any]:
        body = reply.model_dump(mode="json")
        http = status_of(reply)
        self.receipts.learn("oracle", op, http, body)
        return project(op, http, body, "oracle", self.receipts)

    def _compare(
        self,
        op: str,
        exchange: Exchange,
        expected: dict[str, Any],
        *,
        check: bool = False,
    ) -> dict[str, Any]:
        actual = self._actual(op, exchange)
        self.steps.append(KitStep(exchange, expected, actual, check=check))
        return actual

    def _actual(self, op: str, exchange: Exchange) -> dict[str, Any]:
        """The server's answer, projected (its receipts learned); one more reply checked."""
        self.receipts.learn("server", op, exchange.status, exchange.reply)
        self.run.checks += 1
        return project(op, exchange.status, exchange.reply, "server", self.receipts)

    def _op(
        self,
        op: str,
        body: Any,
        *,
        oracle_body: Any = None,
        setup: bool = False,
        copies: int = 1,
    ) -> None:
        """Send one operation (or `copies` identical ones at once, which are ONE operation
        to the oracle), judge the replies against the oracle, then check status."""
        oracle_body = body if oracle_body is None else oracle_body
        if op in FENCE_OPS and not setup:
            self.sent.append((op, body, oracle_body))
        before = self.oracle
        recorded = self._recorded(before, op, oracle_body)
        after, reply, _ = handle(before, op, oracle_body, rules=self.run.rules)
        replay = None if isinstance(reply, ErrorReply) else recorded
        expected = self._expect(op, reply)
        self.failing, self.shape, self.last_expected = (before, op, oracle_body), op, expected
        self.raced_rows = ()
        if copies == 1:
            exchanges: tuple[Exchange, ...] = (self._send(op, body),)
        else:
            exchanges = self._send_together(op, body, copies)
            self.run.duplicates += 1
        open_codes = begin_refusals(before, oracle_body) if op == "begin" else frozenset()
        actuals = [self._actual(op, exchange) for exchange in exchanges]
        other = [other_refusal(expected, actual, open_codes) for actual in actuals]
        failed = [
            replay is None and actual != expected and allowed_failure(op, expected, actual)
            for actual in actuals
        ]
        wrong = [
            a != expected and not f and not o
            for a, f, o in zip(actuals, failed, other, strict=True)
        ]
        order = sorted(range(len(exchanges)), key=lambda i: wrong[i])  # a wrong one last
        for number, i in enumerate(order, 1):
            note = step_note(op, failed[i], number, len(exchanges))
            if other[i]:
                note = f"{actuals[i]['code']} applies too: the spec fixes no order among them"
            self.steps.append(KitStep(exchanges[i], expected, actuals[i], setup=setup, note=note))
        self.last = op if copies == 1 else f"duplicate:{op}"
        if any(wrong):
            actual = actuals[order[-1]]
            agree = all(other == actual for other in actuals)
            rule = hint(op, expected, actual, self.last) if agree else DUPLICATE_RULE
            if agree and replay is not None and "unparseable" not in actual:
                rule = REPLAY_RULE  # a recorded result must be answered, whatever else
            self._fail(rule, describe_differences(expected, actual), after=after)
        self.run.allowed_failures += sum(failed)
        answered = [e for e, f in zip(exchanges, failed, strict=True) if not f]
        if not answered:  # every copy failed where the oracle succeeded: allowed (M2)
            after = self._failed(before, op, oracle_body)
            self.last = f"failed_{op}"
        if replay is not None and replay in self.replies:
            earlier = self.replies[replay]
            for exchange in answered:
                if without_incarnation(exchange.reply) != earlier:
                    self._fail(
                        REPLAY_RULE,
                        (f"recorded {brief(earlier)}, replayed {brief(exchange.reply)}",),
                    )
        if self._recorded(after, op, oracle_body) is not None:
            for exchange in answered[1:]:
                if exchange.reply != answered[0].reply:
                    self._fail(
                        DUPLICATE_RULE, describe_disagreement(answered[0].reply, exchange.reply)
                    )
        self._remember(after, op, oracle_body, body, (answered or exchanges)[0], reply)
        if isinstance(reply, ErrorReply):
            self.last = f"refused:{op}"
        self.oracle = after
        self._check_state()

    def _recorded(self, state: ParticipantState, op: str, body: Any) -> tuple[str, str] | None:
        """`(op, op_id)` if the oracle will answer this request from its record."""
        fence_op = FENCE_OPS.get(op)
        if fence_op is None or fence_op is FenceOp.DISCARD or not isinstance(body, dict):
            return None
        try:
            op_id = OpId.parse(body.get("op_id"))
        except InvalidOpId:
            return None
        if state.fence.data.result(op_id, fence_op) is None:
            return None
        return (op, str(op_id))

    def _failed(self, before: ParticipantState, op: str, body: dict[str, Any]) -> ParticipantState:
        """The oracle's state had the operation failed: a failed commit leaves the fence where
        it was (prepared); a failed restore is the same restore with a wrong digest."""
        if op == "commit":
            return before
        failing = {**body, "expected_digest": BAD_DIGEST, "artifact": ""}
        return handle(before, op, failing, rules=self.run.rules)[0]

    def _remember(
        self,
        after: ParticipantState,
        op: str,
        oracle_body: Any,
        body: Any,
        exchange: Exchange,
        reply: Message,
    ) -> None:
        recorded = self._recorded(after, op, oracle_body)
        if recorded is not None and recorded not in self.replies and exchange.status == 200:
            self.replies[recorded] = without_incarnation(exchange.reply)
        if (
            op == "commit"
            and exchange.status == 200
            and isinstance(exchange.reply, dict)
            and exchange.reply.get("status") == "committed"
            and getattr(reply, "status", None) == "committed"
        ):
            server = (str(exchange.reply.get("artifact", "")), str(exchange.reply.get("digest")))
            oracle = (getattr(reply, "artifact", ""), getattr(reply, "digest", ""))
            self.commits.append(Snapshot(body["op_id"], server, oracle))
        if op == "begin" and exchange.status == 200:
            self.begun.add((body["rollout_id"], body["attempt"]))

    def _check_state(self) -> None:
        """Read status (and completions, for agents) and compare with the oracle's."""
        for (op, expected), exchange in zip(
            self._expected_state(self.oracle), self._read_state(), strict=True
        ):
            actual = self._compare(op, exchange, expected, check=True)
            if actual != expected:
                rule = hint(op, expected, actual, self.last, self.last_expected)
                self._fail(rule, describe_differences(expected, actual))

    def _state_queries(self) -> tuple[str, ...]:
        return ("status", "completions") if self.run.agent else ("status",)

    def _expected_state(self, state: ParticipantState) -> list[tuple[str, dict[str, Any]]]:
        """What `status` (and `completions`) must answer in `state`."""
        expected = []
        for op in self._state_queries():
            if op == "status":
                expected.append((op, self._expect(op, handle(state, "status")[1])))
            else:
                expected.append((op, self._expect(op, CompletionsReply.of(state))))
        return expected

    def _read_state(self) -> list[Exchange]:
        return [self._send(op) for op in self._state_queries()]

    def _expect_refused(self, exchange: Exchange, expected: dict[str, Any], op: str) -> None:
        self.failing, self.shape, self.raced_rows = None, op, ()  # refused before any row
        actual = self._compare(op, exchange, expected)
        if actual != expected:
            code = str(expected["code"])
            self._fail(CODE_RULES[code], describe_differences(expected, actual))
        self.last = f"refused:{op}"
        self._check_state()

    def teardown(self) -> None:
        """End the example: a fresh server is stopped; on a shared one, every execution this
        example began is retired, so the next example starts clean."""
        self.run.previous = tuple(self.steps)
        if self.context is not None:
            self._stop()
            return
        for rollout_id, attempt in sorted(self.begun):
            try:
                self.client.send("retire", {"rollout_id": rollout_id, "attempt": attempt})
            except ServerUnreachable:
                return

    def _allowed_in_race(
        self,
        state: ParticipantState,
        op: str,
        body: Any,
        expected: dict[str, Any],
        actual: dict[str, Any],
    ) -> ParticipantState | None:
        """The state after the server failed `op` for its own reasons, if it may (M2)."""
        if actual == expected or not allowed_failure(op, expected, actual):
            return None
        return self._failed(state, op, body)

    def _judge_race_state(
        self, found: tuple[Explanation, ...], requests: list[tuple[str, Any]]
    ) -> None:
        """Read the state once; the first order explaining the replies whose state it is
        becomes the oracle's; none: a violation (shown against the first order)."""
        reads = [(op, self._send(op)) for op in self._state_queries()]
        actual = [self._actual(op, exchange) for op, exchange in reads]
        candidates = [(e, [x for _, x in self._expected_state(e.state)]) for e in found]
        chosen, expected = next(((e, x) for e, x in candidates if x == actual), candidates[0])
        last = chosen.order[-1]  # the state is what the last request of the order left
        self.failing = (chosen.before[last], *requests[last])
        for (_, exchange), want, got in zip(reads, expected, actual, strict=True):
            self.steps.append(KitStep(exchange, want, got, check=True))
            if got != want:
                self._fail(RACE_RULE, describe_differences(want, got))
        state = self.oracle  # the rows of the order that explained it were judged: covered
        for index in chosen.order:
            state = handle(state, *requests[index], rules=self.run.rules)[0]
        self.oracle = chosen.state

    def _judge_recovered(self, states: tuple[ParticipantState, ...]) -> None:
        """Read the state once after a restart; the first of `states` it is becomes the
        oracle's; none: a violation of §6 (shown against the last)."""
        reads = [(op, self._send(op)) for op in self._state_queries()]
        actual = [self._actual(op, exchange) for op, exchange in reads]
        candidates = [(s, [x for _, x in self._expected_state(s)]) for s in states]
        chosen, expected = next(((s, x) for s, x in candidates if x == actual), candidates[-1])
        for (op, exchange), want, got in zip(reads, expected, actual, strict=True):
            self.steps.append(KitStep(exchange, want, got, check=True))
            if got != want:
                self._fail(hint(op, want, got, "restart"), describe_differences(want, got))
        self.oracle = chosen
