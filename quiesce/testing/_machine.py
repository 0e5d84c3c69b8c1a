"""The conformance kit's hypothesis state machine: one example against the server under test,
every reply judged against the oracle (the module docstring of `_kit` says what is checked).

What lives here: the rules (the wire operations a sequence is made of), how each request is
built for the server and for the oracle, and how the two answers are projected onto what
the protocol fixes and compared. What it does not know: how a run is set up or reported
(`_kit`, `_results`), or the words of a rule (`_rules`).
"""

from __future__ import annotations

import base64
import hashlib
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule
from pydantic import BaseModel, ValidationError

from quiesce.adapters import (
    DEDUPED_OPS,
    REPLY_MODELS,
    CompletionsReply,
    Participant,
    WireError,
    status_of,
)
from quiesce.protocol import InvalidOpId, OpId
from quiesce.protocol.machines import FenceOp
from quiesce.protocol.participant import (
    ParticipantOp,
    ParticipantState,
    from_journal,
    handle,
    journal_of,
    new_participant,
)
from quiesce.protocol.wire import ErrorReply, Message, Receipt
from quiesce.testing._latitude import begin_refusals
from quiesce.testing._race import (
    EXECUTION_TARGETS,
    RACE_DEADLINE_S,
    RACES,
    Explanation,
    explanations,
    recoveries,
)
from quiesce.testing._results import (
    RESTART_METHOD,
    ConformanceSetupError,
    ConformanceViolation,
    KitStep,
    brief,
)
from quiesce.testing._rules import (
    CODE_RULES,
    DUPLICATE_RULE,
    INCARNATION_RULE,
    RACE_RULE,
    describe_differences,
    describe_disagreement,
    hint,
    section_of,
    step_note,
)
from quiesce.testing._session import Abort, KitRun
from quiesce.testing._wire import (
    OPERATIONS,
    Exchange,
    ServerUnreachable,
    WireClient,
    compact_json,
)

__all__ = ["DEADLINE_AT", "ConformanceMachine"]

DEADLINE_AT = 4102444800.0
"""The `deadline_at` every control request carries (2100-01-01): servers do not enforce
deadlines (docs/wire.md), and one constant keeps printed sequences reproducible."""

Key = tuple[str, int]
_FENCE_OPS = {op.value: op for op in FenceOp if op is not FenceOp.STATUS}
_CONTROL_OPS = tuple(_FENCE_OPS)
_AGENT_OPS = ("begin", "boundary", "finish", "ack", "retire")  # in the order rules draw them
_DUPLICATED_OPS = tuple(op.value for op in DEDUPED_OPS)  # one operation when sent at once
_BAD_DIGEST = "0" * 64
_RESTART = Exchange(RESTART_METHOD, "(restart hook)", None, 0, "restarted")


def _post_ops(run: KitRun) -> tuple[str, ...]:
    """The POST operations the server must accept (for the malformed-body rule)."""
    fenced = run.config is None or run.config.fenced
    ops: tuple[str, ...] = _CONTROL_OPS if fenced else ()
    return ops + (_AGENT_OPS if run.agent else ())


# ------------------------------------------------------------------------------- projection


def _reply_model(op: str, http: int) -> type[BaseModel]:
    if http == 200:
        if op == "completions":
            return CompletionsReply
        return REPLY_MODELS[ParticipantOp(op)]
    if http == 409:
        return ErrorReply
    return WireError


def _opid(value: Any) -> str | None:
    return None if value is None else str(value)


def _continuations(items: Any) -> list[str]:
    return sorted(compact_json(c) for c in items or ())


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """A commit the server and the oracle both made: each side's own artifact and digest."""

    op_id: str
    server: tuple[str, str]
    oracle: tuple[str, str]


# ------------------------------------------------------------------------------- machine


TARGETS = st.one_of(st.sampled_from(["active", "next"]), st.integers(-1, 5))
KEYS = st.sampled_from([-1, -1, -1, 0, 1, 2, 3])
"""An execution key: -1 (most of the time, and what shrinking prefers) is a new key for
`begin` and the most recently begun key for the other operations, so begin -> finish ->
retire/ack of one execution is frequent; 0..3 are `(rollout k // 2, attempt k % 2)`, so
keys also collide (duplicates, stale attempts, retire before begin)."""


def _drives_executions(self: ConformanceMachine) -> bool:
    return self.run.executions


def _agent(self: ConformanceMachine) -> bool:
    return self.run.agent


def _not_agent(self: ConformanceMachine) -> bool:
    return not self.run.agent


def _has_post_ops(self: ConformanceMachine) -> bool:
    return bool(_post_ops(self.run))


class ConformanceMachine(RuleBasedStateMachine):
    """One example: setup, then generated operations, each compared with the oracle."""

    run: ClassVar[KitRun]

    def __init__(self) -> None:
        super().__init__()
        run = self.run
        run.examples += 1
        self.prefix = f"{run.nonce}-{run.examples}"
        self.steps: list[KitStep] = []
        self.begun: set[Key] = set()
        self.receipts: dict[str, dict[Key, str]] = {"server": {}, "oracle": {}}
        self.replies: dict[tuple[str, str], Any] = {}
        self.commits: list[_Snapshot] = []
        self.sent: list[tuple[str, Any, Any]] = []  # control requests, for `replay`
        self.texts: dict[int, str] = {}
        self.last = "setup"
        self.latest = 0
        self.fresh_keys = 0
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
        try:
            return self.client.send(op, body, **options)
        except ServerUnreachable as error:
            self._unreachable(error, body)

    def _send_together(self, op: str, body: Any, copies: int) -> tuple[Exchange, ...]:
        try:
            return self.client.send_together(op, body, copies=copies)
        except ServerUnreachable as error:
            self._unreachable(error, body)

    def _unreachable(self, error: ServerUnreachable, body: Any) -> NoReturn:
        self.steps.append(KitStep(Exchange(error.method, error.path, body, 0, error.detail)))
        self._fail("the server stopped answering", (str(error),))

    def _fail(self, rule: str, differences: tuple[str, ...]) -> NoReturn:
        violation = ConformanceViolation(rule, differences, tuple(self.steps), section_of(rule))
        self.run.found(violation)
        raise violation

    def _setup_failed(self, rule: str, differences: tuple[str, ...]) -> NoReturn:
        """The server cannot be brought to a known state. A fresh server per example: a
        plain violation. A shared one: the previous sequence left it stuck, so report that
        sequence and stop (shorter sequences cannot be replayed against a stuck server)."""
        if self.context is not None:
            self._fail(rule, differences)
        steps = (*self.run.previous, *self.steps)
        violation = ConformanceViolation(
            f"{rule} (after the previous sequence)", differences, steps, section_of(rule)
        )
        self.run.found(violation)
        self.run.stuck = True
        raise Abort(violation)

    def _query(self, op: str) -> Any:
        """A setup read (status, completions), parsed; a bad answer is a violation."""
        exchange = self._send(op)
        self.steps.append(KitStep(exchange, setup=True, check=True))
        try:
            return _reply_model(op, 200).model_validate(exchange.reply)
        except ValidationError as error:
            self._setup_failed(
                f"setup: {op} must answer 200 with its reply model",
                (f"got {exchange.status}: {str(error).splitlines()[0]}",),
            )

    def _setup(self) -> OpId:
        status = self._query("status")
        if status.fence != "idle":
            body = {"op_id": _opid(status.active_id), "deadline_at": DEADLINE_AT}
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

    # ------------------------------------------------------------------ judging

    def _learn(self, side: str, op: str, http: int, body: Any) -> None:
        """Remember the receipts a side reported (so ACKs quote each side's own)."""
        if http != 200 or op not in ("finish", "retire", "begin", "boundary"):
            return
        receipt = body.get("receipt") if isinstance(body, dict) else None
        if isinstance(receipt, dict):
            try:
                parsed = Receipt.model_validate(receipt)
            except ValidationError:
                return
            self.receipts[side].setdefault((parsed.rollout_id, parsed.attempt), parsed.receipt)

    def _receipt(self, side: str, item: Any) -> list[Any]:
        if not isinstance(item, dict):
            return [item]
        key = (item.get("rollout_id"), item.get("attempt"))
        known = self.receipts[side].get(key)  # type: ignore[arg-type]
        text = item.get("receipt")
        return [key[0], key[1], "<its receipt>" if known is not None and text == known else text]

    def _project(self, op: str, http: int, body: Any, side: str) -> dict[str, Any]:
        """The deterministic part of an answer, comparable between server and oracle."""
        out: dict[str, Any] = {"http": http}
        model = _reply_model(op, http)
        try:
            reply = model.model_validate(body)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "<body>"
            out["unparseable"] = f"not a {model.__name__}: {where}: {first['msg']}"
            return out
        data = reply.model_dump(mode="json")
        if isinstance(reply, WireError):
            out["code"] = data["code"]
            if http == 422:
                out["field"] = data["field"]
            return out
        out["participant"] = data["participant"]
        out["incarnation"] = data["incarnation"]
        if isinstance(reply, ErrorReply):
            out.update(
                code=data["code"],
                active_id=data["active_id"],
                high_watermark=data["high_watermark"],
            )
            return out
        pick = {
            "capabilities": ("role", "instance_role"),
            "status": (
                "fence",
                "active_id",
                "high_watermark",
                "role_state",
                "live_executions",
                "completed_unacknowledged",
            ),
            "prepare": ("op_id", "status"),
            "commit": ("op_id", "status"),
            "restore": ("op_id", "status"),
            "discard": ("op_id", "status"),
            "resume": ("op_id", "retired"),
            "retire": ("outcome",),
            "begin": ("rollout_id", "attempt", "state", "turn"),
            "boundary": ("rollout_id", "attempt", "state", "turn"),
            "finish": ("rollout_id", "attempt", "state", "turn"),
        }.get(op, ())
        out.update({k: data[k] for k in pick})
        if op in ("commit", "restore", "discard") and data["status"] in ("committed", "restored"):
            out["continuations"] = _continuations(data["continuations"])
        if op == "commit" and data["status"] == "committed":
            out["digest_is_sha256_of_artifact"] = _digest_ok(data["artifact"], data["digest"])
        if op in ("retire", "begin", "boundary", "finish"):
            receipt = data.get("receipt")
            out["receipt"] = None if receipt is None else self._receipt(side, receipt)
        if op == "ack":
            out["acknowledged"] = sorted(self._receipt(side, r) for r in data["acknowledged"])
            out["unknown"] = sorted(self._receipt(side, r) for r in data["unknown"])
        if op == "completions":
            out["receipts"] = sorted(self._receipt(side, r) for r in data["receipts"])
        return out

    def _expect(self, op: str, reply: Message) -> dict[str, Any]:
        body = reply.model_dump(mode="json")
        http = status_of(reply)
        self._learn("oracle", op, http, body)
        return self._project(op, http, body, "oracle")

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
        self._learn("server", op, exchange.status, exchange.reply)
        self.run.checks += 1
        return self._project(op, exchange.status, exchange.reply, "server")

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
        if op in _FENCE_OPS and not setup:
            self.sent.append((op, body, oracle_body))
        before = self.oracle
        recorded = self._recorded(before, op, oracle_body)
        after, reply, _ = handle(before, op, oracle_body)
        replay = None if isinstance(reply, ErrorReply) else recorded
        expected = self._expect(op, reply)
        if copies == 1:
            exchanges: tuple[Exchange, ...] = (self._send(op, body),)
        else:
            exchanges = self._send_together(op, body, copies)
            self.run.duplicates += 1
        open_codes = begin_refusals(before, oracle_body) if op == "begin" else frozenset()
        actuals = [self._actual(op, exchange) for exchange in exchanges]
        other = [_other_refusal(expected, actual, open_codes) for actual in actuals]
        failed = [
            replay is None and actual != expected and _allowed_failure(op, expected, actual)
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
            self._fail(rule, describe_differences(expected, actual))
        self.run.allowed_failures += sum(failed)
        answered = [e for e, f in zip(exchanges, failed, strict=True) if not f]
        if not answered:  # every copy failed where the oracle succeeded: allowed (M2)
            after = self._failed(before, op, oracle_body)
            self.last = f"failed_{op}"
        if replay is not None and replay in self.replies:
            earlier = self.replies[replay]
            for exchange in answered:
                if _without_incarnation(exchange.reply) != earlier:
                    self._fail(
                        "M2: the same (op_id, op) after a success is answered from the record, "
                        "unchanged",
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
        fence_op = _FENCE_OPS.get(op)
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
        failing = {**body, "expected_digest": _BAD_DIGEST, "artifact": ""}
        return handle(before, op, failing)[0]

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
            self.replies[recorded] = _without_incarnation(exchange.reply)
        if (
            op == "commit"
            and exchange.status == 200
            and isinstance(exchange.reply, dict)
            and exchange.reply.get("status") == "committed"
            and getattr(reply, "status", None) == "committed"
        ):
            server = (str(exchange.reply.get("artifact", "")), str(exchange.reply.get("digest")))
            oracle = (getattr(reply, "artifact", ""), getattr(reply, "digest", ""))
            self.commits.append(_Snapshot(body["op_id"], server, oracle))
        if op == "begin" and exchange.status == 200:
            self.begun.add((body["rollout_id"], body["attempt"]))

    def _check_state(self) -> None:
        """Read status (and completions, for agents) and compare with the oracle's."""
        for (op, expected), exchange in zip(
            self._expected_state(self.oracle), self._read_state(), strict=True
        ):
            actual = self._compare(op, exchange, expected, check=True)
            if actual != expected:
                self._fail(
                    hint(op, expected, actual, self.last), describe_differences(expected, actual)
                )

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

    # ------------------------------------------------------------------ fence rules

    @rule()
    def pause(self) -> None:
        """Send nothing. The rule hypothesis shrinks towards (it has no arguments, so it sorts
        first): a needless request in a failing sequence becomes a pause, and the printed
        sequence keeps only the requests that matter."""

    def _control(self, at: str | int, kind: str = "ck") -> dict[str, Any]:
        return {"op_id": self._id(at, kind), "deadline_at": DEADLINE_AT}

    @rule(at=TARGETS)
    def prepare(self, at: str | int) -> None:
        self._op("prepare", self._control(at))

    @rule(at=TARGETS)
    def commit(self, at: str | int) -> None:
        self._op("commit", self._control(at))

    @rule(at=TARGETS)
    def resume(self, at: str | int) -> None:
        self._op("resume", self._control(at))

    @rule(at=TARGETS, source=st.integers(0, 3), intact=st.booleans())
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
        bad = {**body, "snapshot_id": named, "artifact": corrupt, "expected_digest": _BAD_DIGEST}
        return bad, bad

    @rule(
        op=st.sampled_from(_DUPLICATED_OPS),
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

    @rule()
    def checkpoint(self) -> None:
        """Two requests: prepare a fresh id and commit it. Random single steps rarely name
        the same id twice in a row, and a fence past `prepared` is where replays (and the
        phases after commit) are judged."""
        self.prepare("next")
        self.commit("active")

    @precondition(lambda self: bool(self.sent))
    @rule(index=st.integers(0, 7))
    def replay(self, index: int) -> None:
        """Send an earlier control request of this example again, unchanged (a controller's
        retry arriving after the fence moved on: answered from the record, or refused)."""
        op, body, oracle_body = self.sent[-1 - index % len(self.sent)]
        self._op(op, body, oracle_body=oracle_body)

    @rule(shape=st.sampled_from(RACES))
    def race(self, shape: tuple[tuple[str, str], ...]) -> None:
        """Different control requests in flight at once (`_race.RACES`: a resume or the
        next prepare arriving while a prepare long-polls), judged by linearizability: some
        order of the overlapping requests must explain every reply and the state after."""
        if self.run.executions and any(at in EXECUTION_TARGETS for _, at in shape):
            self._execution_to_race(next(at for _, at in shape if at in EXECUTION_TARGETS))
        requests: list[tuple[str, Any]] = []
        oracle_requests: list[tuple[str, Any]] = []
        for op, at in shape:
            server, oracle = self._race_bodies(op, at, requests)
            requests.append((op, server))
            oracle_requests.append((op, oracle))
        try:
            answers = self.client.send_overlapping(requests)
        except ServerUnreachable as error:
            self._unreachable(error, requests[0][1])
        self.run.races += 1
        actual = [
            self._actual(op, t.exchange) for (op, _), t in zip(requests, answers, strict=True)
        ]
        found, first = explanations(
            self.oracle, oracle_requests, answers, actual, self._expect, self._allowed_in_race
        )
        shown = found[0] if found else first
        wrong = [i for i in range(len(actual)) if actual[i] != shown.expected[i]]
        for i in sorted(range(len(answers)), key=lambda i: i in wrong):  # a wrong one last
            note = f"raced: request {i + 1} of {len(answers)}, sent while the others were in flight"
            self.steps.append(KitStep(answers[i].exchange, shown.expected[i], actual[i], note=note))
        self.last = "race"
        if not found:
            self._fail(
                RACE_RULE, describe_differences(shown.expected[wrong[-1]], actual[wrong[-1]])
            )
        self._judge_race_state(found)

    def _execution_to_race(self, kind: str) -> None:
        """Begin a fresh execution (and finish it, for `completed`): what a raced retire or
        ACK of `latest` then names."""
        self.begin(-1, 2, 0)
        if kind == "completed":
            self.finish(-1, 1)

    def _race_bodies(
        self, op: str, at: str, earlier: list[tuple[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A raced request's body for the server and for the oracle (an ACK quotes each
        side's own receipt); `same` is the first request's op id."""
        if op in ("retire", "ack"):
            rollout_id, attempt = self._key(-1)
            key = {"rollout_id": rollout_id, "attempt": attempt}
            if op == "retire":
                return key, key
            server, oracle = (
                {"receipts": [{**key, "receipt": receipts.get((rollout_id, attempt), "none")}]}
                for receipts in (self.receipts["server"], self.receipts["oracle"])
            )
            return server, oracle
        op_id = earlier[0][1]["op_id"] if at == "same" else self._id(at, "ck")
        body = {"op_id": op_id, "deadline_at": time.time() + RACE_DEADLINE_S}
        return body, body

    def _allowed_in_race(
        self,
        state: ParticipantState,
        op: str,
        body: Any,
        expected: dict[str, Any],
        actual: dict[str, Any],
    ) -> ParticipantState | None:
        """The state after the server failed `op` for its own reasons, if it may (M2)."""
        if actual == expected or not _allowed_failure(op, expected, actual):
            return None
        return self._failed(state, op, body)

    def _judge_race_state(self, found: tuple[Explanation, ...]) -> None:
        """Read the state once; the first order explaining the replies whose state it is
        becomes the oracle's; none: a violation (shown against the first order)."""
        reads = [(op, self._send(op)) for op in self._state_queries()]
        actual = [self._actual(op, exchange) for op, exchange in reads]
        candidates = [(e, [x for _, x in self._expected_state(e.state)]) for e in found]
        chosen, expected = next(((e, x) for e, x in candidates if x == actual), candidates[0])
        for (_, exchange), want, got in zip(reads, expected, actual, strict=True):
            self.steps.append(KitStep(exchange, want, got, check=True))
            if got != want:
                self._fail(RACE_RULE, describe_differences(want, got))
        self.oracle = chosen.state

    @precondition(lambda self: self.run.restart is not None)
    # Mostly between requests; shrinking prefers that (None comes first): a kill during a
    # request may or may not beat the reply, so a failure is shrunk towards a deterministic
    # kill when one shows it too.
    @rule(during=st.sampled_from((None, None, "prepare", "commit", "resume")), at=TARGETS)
    def restart(self, during: str | None, at: str | int) -> None:
        """Kill and restart the server (§6): it must come back under a new incarnation with
        exactly what its journal must keep (`journal_of` of the oracle), so everything
        replied before the kill holds after it; recorded results replay unchanged later.
        With `during`, the kill comes while that request is in flight (`_restart_during`)."""
        assert self.run.restart is not None
        if during is not None:
            self._restart_during(during, at)
            return
        before = self.run.capabilities.incarnation if self.run.capabilities else ""
        self.run.restarts += 1
        self.run.restart()
        self.run.connect(self.run.url)
        assert self.run.capabilities is not None
        incarnation = self.run.capabilities.incarnation
        self.steps.append(KitStep(_RESTART, note="the kit killed and restarted the server"))
        if incarnation == before:
            self._fail(INCARNATION_RULE, (f"incarnation: still {before!r} after the restart",))
        self.oracle = from_journal(journal_of(self.oracle), incarnation)
        self.last = "restart"
        self._check_state()

    def _restart_during(self, op: str, at: str | int) -> None:
        """Kill and restart the server while `op` is in flight (§6): a reply that came must be
        durable; without one, `op` took effect before the kill or never did (the state read
        after says which), and re-sending it then gets the recorded reply or runs it now."""
        assert self.run.restart is not None and self.run.capabilities is not None
        before, body = self.oracle, self._control(at)
        killed = self.run.capabilities.incarnation
        self.sent.append((op, body, body))
        exchange = self.client.send_while(op, body, self.run.restart)
        self.run.restarts += 1
        after, reply, _ = handle(before, op, body)
        answered = exchange is not None and exchange.status < 500
        if exchange is not None and answered:
            expected = self._expect(op, reply)
            actual = self._compare(op, exchange, expected)
            if actual != expected and not _allowed_failure(op, expected, actual):
                self._fail(hint(op, expected, actual, op), describe_differences(expected, actual))
            if actual != expected:
                after = self._failed(before, op, body)
            self._remember(after, op, body, body, exchange, reply)
        else:
            method, path = OPERATIONS[op]
            cut = exchange or Exchange(method, path, body, 0, "no answer")
            self.steps.append(KitStep(cut, note="no answer: the kill below cut it"))
        self.run.connect(self.run.url)
        incarnation = self.run.capabilities.incarnation
        self.steps.append(KitStep(_RESTART, note="killed while the request above was in flight"))
        if incarnation == killed:
            self._fail(INCARNATION_RULE, (f"incarnation: still {killed!r} after the restart",))
        self.last = "restart"
        self._judge_recovered(recoveries(before, after, answered, incarnation))
        if not answered:
            self._op(op, body)

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

    @rule(at=TARGETS, key=KEYS)
    def discard(self, at: str | int, key: int) -> None:
        rollout_id, attempt = self._key(key)
        body = {"op_id": self._id(at, "rs"), "rollout_id": rollout_id, "attempt": attempt}
        self._op("discard", body)

    # ------------------------------------------------------------------ agent rules (M3)

    @precondition(_drives_executions)
    # Mostly a fresh start: resume_from_turn > 0 claims a restored continuation, which
    # exists only after a restore, so it is mostly refused (unknown_execution).
    @rule(key=KEYS, turns=st.integers(1, 3), resume=st.sampled_from([0, 0, 0, 1, 2]))
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
    @rule(turns=st.integers(1, 3), reward=st.integers(0, 2))
    def begin_and_finish(self, turns: int, reward: int) -> None:
        """Two requests: begin a new execution and finish it at once. Random single steps
        rarely complete an execution while the fence stays idle, and a completed, un-ACKed
        result is where the ACK/retire rules (S17) bite."""
        self.begin(-1, turns, 0)
        self.finish(-1, reward)

    @precondition(_drives_executions)
    @rule(key=KEYS, turn=st.integers(0, 3))
    def boundary(self, key: int, turn: int) -> None:
        rollout_id, attempt = self._key(key)
        self._op("boundary", {"rollout_id": rollout_id, "attempt": attempt, "turn": turn})

    @precondition(_drives_executions)
    @rule(key=KEYS, reward=st.integers(0, 2))
    def finish(self, key: int, reward: int) -> None:
        rollout_id, attempt = self._key(key)
        body = {"rollout_id": rollout_id, "attempt": attempt, "result": {"reward": reward}}
        self._op("finish", body)

    @precondition(_agent)
    @rule(items=st.lists(st.tuples(KEYS, st.booleans()), min_size=1, max_size=3))
    def ack(self, items: list[tuple[int, bool]]) -> None:
        bodies: dict[str, list[dict[str, Any]]] = {"server": [], "oracle": []}
        for index, exact in items:
            key = self._key(index)
            for side, receipts in bodies.items():
                known = self.receipts[side].get(key)
                text = known if exact and known is not None else "not-a-receipt"
                receipts.append({"rollout_id": key[0], "attempt": key[1], "receipt": text})
        self._op("ack", {"receipts": bodies["server"]}, oracle_body={"receipts": bodies["oracle"]})

    @precondition(_agent)
    @rule(key=KEYS)
    def retire(self, key: int) -> None:
        rollout_id, attempt = self._key(key)
        self._op("retire", {"rollout_id": rollout_id, "attempt": attempt})

    @precondition(_not_agent)
    @rule(op=st.sampled_from(_AGENT_OPS))
    def agent_operation_elsewhere(self, op: str) -> None:
        self._op(op, _valid_body(op, self.prefix, self._id("next", "ck")))

    # ------------------------------------------------------------------ hostile requests

    @precondition(_has_post_ops)
    @precondition(lambda self: self.run.over_http)
    @rule(
        index=st.integers(0, len(_CONTROL_OPS) + len(_AGENT_OPS) - 1),
        flaw=st.sampled_from(["unknown_field", "wrong_type", "missing_field", "not_json"]),
    )
    def malformed(self, index: int, flaw: str) -> None:
        ops = _post_ops(self.run)
        op = ops[index % len(ops)]
        body = _valid_body(op, self.prefix, self._id("next", "ck"))
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
    @rule(
        op=st.sampled_from(["status", "prepare", "resume"]), auth=st.sampled_from(["none", "wrong"])
    )
    def unauthenticated(self, op: str, auth: str) -> None:
        body = None if op == "status" else self._control("next")
        expected = {"http": 401, "code": "unauthorized"}
        self._expect_refused(self._send(op, body, auth=auth), expected, op)


def _valid_body(op: str, prefix: str, op_id: str) -> dict[str, Any]:
    """A well-formed request body for `op` (the malformed-body rule then breaks one field)."""
    rollout: dict[str, Any] = {"rollout_id": f"{prefix}-r0", "attempt": 0}
    control: dict[str, Any] = {"op_id": op_id, "deadline_at": DEADLINE_AT}
    if op in ("prepare", "commit", "resume"):
        return control
    if op == "restore":
        return {**control, "snapshot_id": op_id, "artifact": "", "expected_digest": _BAD_DIGEST}
    if op == "discard":
        return {"op_id": op_id, **rollout}
    extra: dict[str, dict[str, Any]] = {
        "begin": {"group_id": "g", "turns": 1},
        "boundary": {"turn": 1},
        "finish": {"result": {}},
        "retire": {},
    }
    if op == "ack":
        return {"receipts": [{**rollout, "receipt": "not-a-receipt"}]}
    return {**rollout, **extra[op]}


def _allowed_failure(op: str, expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    """The server failed a commit or restore the oracle ran successfully (its own reasons)."""
    wins = {"commit": ("committed", "failed"), "restore": ("restored", "failed")}.get(op)
    if wins is None or expected.get("http") != 200 or actual.get("http") != 200:
        return False
    return (expected.get("status"), actual.get("status")) == wins and all(
        expected.get(k) == actual.get(k) for k in ("participant", "incarnation", "op_id")
    )


def _other_refusal(expected: dict[str, Any], actual: dict[str, Any], codes: frozenset[str]) -> bool:
    """The server refused with another of the refusals that apply (`codes`), where the
    spec fixes no order among them; the rest of the reply is the oracle's."""
    code = actual.get("code")
    if code == expected.get("code") or expected.get("code") not in codes:
        return False
    return code in codes and actual == {**expected, "code": code}


def _digest_ok(artifact: str, digest: str) -> bool:
    try:
        raw = base64.b64decode(artifact, validate=True)
    except ValueError:
        return False
    return hashlib.sha256(raw).hexdigest() == digest


def _without_incarnation(reply: Any) -> Any:
    if isinstance(reply, dict):
        return {k: v for k, v in reply.items() if k != "incarnation"}
    return reply
