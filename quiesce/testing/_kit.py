"""The conformance kit: drive a participant server over HTTP and judge every reply against
the reference participant of `quiesce.protocol`.

What lives here: a hypothesis `RuleBasedStateMachine` whose rules are the wire operations
of docs/wire.md (fence operations for every role; `begin`, `boundary`, `finish`, `ack` and
`retire` for agents; malformed and unauthenticated requests for all). Each rule sends one
request to the server under test and feeds the same request to an ORACLE, a pure
`ParticipantState` stepped with `quiesce.protocol.handle`. The deterministic part of both
answers (HTTP status, error code, active id, high-watermark, reply status, execution state,
receipts, continuations; never blockers' wording, artifact bytes or digests, which are the
server's own business) must be equal; then `status` (and, for agents, `completions`) is
read and compared too, so a refusal that changed state, or a failure that left the fence in
the wrong place, is caught at the request that caused it. Hypothesis shrinks a failing run
to the shortest sequence, which `ConformanceResult.report()` prints as numbered HTTP
requests with the expected and the actual reply.

Checks the oracle cannot make, made here: a recorded result is replayed *unchanged* (the
server's own earlier body, M2); a committed artifact's digest is the SHA-256 of its bytes;
every reply names the same participant and incarnation (a change means a restart).

One server, many examples (the honest design for a server you did not start): every example
begins where the last one left the server. It reads `status`; aborts the active id if the
fence is not idle; ACKs every completed-but-unACKed receipt (agents); requires then an idle
fence with nothing live; and finally resumes a FRESH id one above the server's
high-watermark (checked against the oracle: "a resume of an unknown id above the watermark
retires it"). That id is the example's base: every op id of the example is derived from it
(`base - 1` is stale, `base` is retired, `base + k` are fresh), so stale ids, conflicts and
replays are frequent, and a shrunk example replays identically. Rollout ids carry a
per-run nonce and the example number, so earlier examples' executions never interfere; an
example retires every execution it began when it ends.

Concurrent duplicates (M2: "a concurrent duplicate waits for the first"): a controller's
retry can race its original, so the rule `concurrent_duplicate` sends the same prepare,
commit, resume or restore (same op id, same body) twice at once, with
`WireClient.send_together` (both copies in flight before either reply is read). The oracle
steps ONCE: each reply must be its one reply; two successful replies of a recorded result
must be identical (a commit's artifact and digest included); and the `status` read after
must be that of a single request. A copy answered 409 or 5xx while the other succeeded, or
two different replies, break that rule; replies that agree and are both wrong are reported
under the rule they break. A copy may fail where the oracle succeeded (see below): "if the
first failed, the duplicate runs on its own", so one `failed` copy and one success is
accepted, and the state must then be the success's. Whether the copies overlap inside the
server is the server's business; the kit makes sure they do on the wire.

Commit and restore failures: a server may fail a commit or a restore for its own reasons
(a full disk). Where the oracle succeeded and the server answered `failed`, the kit accepts
it (`allowed_failures` counts them) and steps the oracle down the failure branch: a failed
commit must leave the fence `prepared`, a failed restore `restore_failed_paused`, and the
next `status` check holds the server to that. A server that never fails gives the kit no
way to force a commit failure over the wire (the reference participant fails a commit only
when its role is not quiescent, which the wire cannot bring about); such a server is checked
on everything else, and `allowed_failures` is 0.

Requirements on the server: it serves the routes of docs/wire.md, nobody else uses it during
the run, and an agent does not advance executions on its own (`quiesce serve --no-work`;
the kit reports `boundary` and `finish` itself). For an agent that runs its own rollouts,
pass `executions=False`: the kit then checks the fence, ACK and retire only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    get_state_machine_test,
    precondition,
    rule,
)
from pydantic import BaseModel, ValidationError

from quiesce.adapters import REPLY_MODELS, CompletionsReply, WireError, status_of
from quiesce.fsm import QuiesceError
from quiesce.protocol import InvalidOpId, OpId
from quiesce.protocol.machines import FenceOp
from quiesce.protocol.participant import (
    AgentRole,
    ParticipantConfig,
    ParticipantOp,
    ParticipantState,
    handle,
    new_participant,
    stamp,
)
from quiesce.protocol.wire import Capabilities, ErrorReply, Message, Receipt
from quiesce.testing._wire import Exchange, ServerUnreachable, WireClient

__all__ = [
    "DEADLINE_AT",
    "ROLES",
    "ConformanceResult",
    "ConformanceSetupError",
    "ConformanceViolation",
    "KitStep",
    "assert_conforms",
    "check_conformance",
]

ROLES = ("agent", "policy", "resources")
DEADLINE_AT = 4102444800.0
"""The `deadline_at` every control request carries (2100-01-01): servers do not enforce
deadlines (docs/wire.md), and one constant keeps printed sequences reproducible."""

Key = tuple[str, int]
_FENCE_OPS = {op.value: op for op in FenceOp if op is not FenceOp.STATUS}
_AGENT_OPS = ("begin", "boundary", "finish", "ack", "retire")
_CONTROL_OPS = ("prepare", "commit", "resume", "restore", "discard")
_DUPLICATED_OPS = ("prepare", "commit", "resume", "restore")
"""The operations whose concurrent duplicates are one operation (M2)."""
_BAD_DIGEST = "0" * 64


# ------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class KitStep:
    """One request of a sequence: what was sent and answered, and, when the kit compared
    it, the `expected` (oracle) and `actual` (server) projections. `setup` marks the
    requests that bring the server to a known state; `check` the `status`/`completions`
    reads after each operation; `note` says why a difference was allowed."""

    exchange: Exchange
    expected: dict[str, Any] | None = None
    actual: dict[str, Any] | None = None
    setup: bool = False
    check: bool = False
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of this step."""
        ex = self.exchange
        return {
            "method": ex.method,
            "path": ex.path,
            "body": ex.body,
            "auth": ex.auth,
            "status": ex.status,
            "reply": ex.reply,
            "expected": self.expected,
            "actual": self.actual,
            "setup": self.setup,
            "check": self.check,
            "note": self.note,
        }


class ConformanceViolation(QuiesceError):
    """The server broke `rule` at the last of `steps` (the whole sequence from the start of
    the example). `differences` lists `field: expected X, got Y`."""

    def __init__(self, rule: str, differences: tuple[str, ...], steps: tuple[KitStep, ...]) -> None:
        self.rule = rule
        self.differences = differences
        self.steps = steps
        super().__init__(f"{rule}: {'; '.join(differences)} (after {len(steps)} requests)")


class ConformanceSetupError(QuiesceError):
    """The kit cannot start: the server at `url` is unreachable, or is not what was asked
    for (`detail` says which)."""

    def __init__(self, url: str, detail: str) -> None:
        self.url = url
        self.detail = detail
        super().__init__(f"cannot check {url}: {detail}")


@dataclass(frozen=True)
class ConformanceResult:
    """The outcome of a conformance run. `ok` is False iff `violation` is set; its `steps`
    are the shortest failing sequence hypothesis found. `examples` counts the sequences run
    (shrinking included), `requests` the HTTP requests sent, `checks` the replies compared
    with the oracle, `allowed_failures` the commits/restores the server failed where the
    oracle succeeded (accepted, and checked to land where M2 says), `duplicates` the pairs of
    identical control requests sent at once (each copy counts in `requests` and `checks`).
    `flaky` is True when the
    shortest sequence did not fail again on replay (the server is not deterministic);
    `shrunk` is False when a shared server was left stuck by the failure, so hypothesis
    could not replay shorter sequences against it."""

    url: str
    role: str
    participant: str
    seed: int
    examples: int
    requests: int
    checks: int
    allowed_failures: int
    duplicates: int = 0
    violation: ConformanceViolation | None = None
    flaky: bool = False
    shrunk: bool = True

    @property
    def ok(self) -> bool:
        """True iff every checked reply matched the oracle."""
        return self.violation is None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the `quiesce conform --json` document)."""
        failure = None
        if self.violation is not None:
            failure = {
                "rule": self.violation.rule,
                "differences": list(self.violation.differences),
                "flaky": self.flaky,
                "shrunk": self.shrunk,
                "sequence": [s.to_json() for s in _shown(self.violation.steps)],
            }
        return {
            "ok": self.ok,
            "url": self.url,
            "role": self.role,
            "participant": self.participant,
            "seed": self.seed,
            "examples": self.examples,
            "requests": self.requests,
            "checks": self.checks,
            "allowed_failures": self.allowed_failures,
            "duplicates": self.duplicates,
            "failure": failure,
        }

    def report(self) -> str:
        """The human report: a summary line and, on failure, the numbered sequence."""
        head = (
            f"{self.role} {self.participant!r} at {self.url}: {self.examples} sequences, "
            f"{self.requests} requests, {self.checks} replies checked, "
            f"{self.duplicates} concurrent duplicates, "
            f"{self.allowed_failures} allowed commit/restore failures (seed {self.seed})"
        )
        if self.violation is None:
            return f"PASS  {head}"
        lines = [f"FAIL  {head}", f"rule: {self.violation.rule}"]
        lines += [f"  {d}" for d in self.violation.differences]
        if self.flaky:
            lines.append("note: the sequence did not fail again on replay (flaky server)")
        if not self.shrunk:
            lines.append(
                "note: not shrunk: the server could not be brought back to an idle fence after "
                "it (use a factory of fresh servers to shrink further)"
            )
        shown = _shown(self.violation.steps)
        lines.append(f"shortest failing sequence ({len(shown)} requests):")
        for number, step in enumerate(shown, 1):
            lines += _format_step(number, step, last=step is shown[-1])
        return "\n".join(lines)


def _shown(steps: tuple[KitStep, ...]) -> list[KitStep]:
    """The steps worth printing: every request that can change state, and the failing one
    (passing `status`/`completions` reads change nothing and only add noise)."""
    last = steps[-1] if steps else None
    return [s for s in steps if s is last or not (s.check or s.exchange.method == "GET")]


def _format_step(number: int, step: KitStep, *, last: bool) -> list[str]:
    tag = "  [setup]" if step.setup else ""
    lines = [f"{number:3}. {step.exchange.request_line()}{tag}"]
    lines.append(f"     -> {step.exchange.status} {_brief(step.exchange.reply)}")
    if step.note:
        lines.append(f"     ({step.note})")
    if last and step.expected is not None:
        lines.append(f"     expected: {_compact(step.expected)}")
        lines.append(f"     actual:   {_compact(step.actual)}")
    return lines


def _brief(reply: Any) -> str:
    if not isinstance(reply, dict):
        text = str(reply)
        return text if len(text) <= 120 else text[:117] + "..."
    shown = {
        k: (v[:24] + "..." if isinstance(v, str) and len(v) > 27 else v)
        for k, v in reply.items()
        if k not in ("participant", "incarnation", "message")
    }
    return _compact(shown)


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


# ------------------------------------------------------------------------------- the run


Server = str | Callable[[], AbstractContextManager[Any]]
"""What the kit checks: the URL of a running server (examples share it), or a factory whose
context manager starts a fresh server per example and yields its URL (or an object with a
`url`, like `LocalServer`)."""


class _Abort(BaseException):
    """Raised when shrinking cannot go on (a shared server is stuck) or the server is not
    what was asked for. A BaseException, so hypothesis does not try to shrink it."""

    def __init__(self, error: QuiesceError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class _Run:
    """What every example of one run shares: the server, its identity, the counters."""

    server: Server
    token: str
    role: str
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
        return self.role == "agent"

    @property
    def post_ops(self) -> tuple[str, ...]:
        """The POST operations this server must accept (for the malformed-body rule)."""
        fenced = self.config is None or self.config.fenced
        ops: tuple[str, ...] = _CONTROL_OPS if fenced else ()
        return ops + (_AGENT_OPS if self.agent else ())

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


def _discover(client: WireClient, role: str) -> tuple[Capabilities, ParticipantConfig]:
    try:
        exchange = client.send("capabilities")
    except ServerUnreachable as error:
        raise ConformanceSetupError(client.url, str(error)) from None
    if exchange.status != 200:
        detail = f"capabilities answered {exchange.status} {_brief(exchange.reply)}"
        if exchange.status == 401:
            detail += " (wrong bearer token?)"
        raise ConformanceSetupError(client.url, detail)
    try:
        caps = Capabilities.model_validate(exchange.reply)
    except ValidationError as error:
        raise ConformanceSetupError(client.url, f"capabilities do not parse: {error}") from None
    if caps.role != role:
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


def check_conformance(
    server: Server,
    role: str,
    token: str,
    *,
    examples: int = 100,
    steps: int = 25,
    seed: int | None = None,
    executions: bool = True,
    timeout: float = 10.0,
) -> ConformanceResult:
    """Check a participant server (role `agent`, `policy` or `resources`) against the
    reference participant: `examples` generated sequences of up to `steps` operations each.
    Returns a `ConformanceResult` (never raises for a non-conforming server); raises
    `ConformanceSetupError` if the server cannot be reached or has another role.

    `server` is the URL of a running server (the examples share it: see the module
    docstring), or a factory of fresh servers (`lambda: LocalServer.start(...)`): one per
    example, so even a server that a bug leaves stuck is shrunk to its shortest sequence.
    `executions=False` skips `begin`/`boundary`/`finish` (an agent that runs its own
    rollouts). `seed` makes the generated sequences reproducible (None: a random one,
    reported in the result).

    >>> check_conformance("http://127.0.0.1:1", "agent", "t")  # doctest: +SKIP
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    run = _Run(server, token, role, executions and role == "agent", timeout)
    if isinstance(server, str):
        try:
            run.connect(server)
        except ConformanceSetupError:
            run.disconnect()
            raise
    chosen = seed if seed is not None else secrets.randbelow(1 << 32)
    machine = type("ConformanceMachine", (_Machine,), {"run": run})
    test = get_state_machine_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
            report_multiple_bugs=False,
            phases=(Phase.explicit, Phase.generate, Phase.shrink),
        ),
    )
    outcome: BaseException | None = None
    try:
        hypothesis_seed(chosen)(test)()
    except (Exception, _Abort, BaseExceptionGroup) as error:  # the minimal failure
        outcome = error
    finally:
        run.disconnect()
    if run.setup_error is not None:
        raise run.setup_error
    violation, flaky, shrunk = None, False, True
    if run.stuck:
        violation, shrunk = run.best, False
    elif isinstance(outcome, ConformanceViolation):
        violation = outcome
    elif outcome is not None:  # FlakyFailure & co: a replay did not fail the same way
        violation, flaky = run.best, True
        if violation is None:
            raise outcome
    return ConformanceResult(
        url=run.url,
        role=role,
        participant=run.config.name if run.config else "?",
        seed=chosen,
        examples=run.examples,
        requests=run.requests,
        checks=run.checks,
        allowed_failures=run.allowed_failures,
        duplicates=run.duplicates,
        violation=violation,
        flaky=flaky,
        shrunk=shrunk,
    )


def assert_conforms(
    server: Server, role: str, token: str, *, examples: int = 50, **options: Any
) -> ConformanceResult:
    """`check_conformance`, raising `AssertionError` with the report (the shortest failing
    sequence) when the server does not conform; returns the result when it does.

    >>> assert_conforms("http://127.0.0.1:1", "policy", "t")  # doctest: +SKIP
    """
    result = check_conformance(server, role, token, examples=examples, **options)
    if not result.ok:
        raise AssertionError(result.report())
    return result


def _first_violation(group: BaseExceptionGroup[Any]) -> ConformanceViolation | None:
    for error in group.exceptions:
        if isinstance(error, ConformanceViolation):
            return error
        if isinstance(error, BaseExceptionGroup):
            found = _first_violation(error)
            if found is not None:
                return found
    return None


# ------------------------------------------------------------------------------- hints


_CODE_RULES = {
    "stale_checkpoint": "M2 (S15): an id at or below the high-watermark (the newest retired "
    "id) is refused stale_checkpoint, carrying the watermark",
    "checkpoint_conflict": "M2 (S5): another id while one is active is refused "
    "checkpoint_conflict, carrying the active id",
    "invalid_phase": "M2/M3: an operation not legal in the current state is refused "
    "invalid_phase and changes nothing",
    "admission_closed": "M3: begin while the fence is not idle is refused admission_closed",
    "stale_attempt": "M3: begin of an acked or tombstoned attempt is refused stale_attempt",
    "duplicate_execution": "M3: begin of a live attempt is refused duplicate_execution",
    "unknown_execution": "M3: an event for an execution (or restored continuation) this agent "
    "does not hold is refused unknown_execution",
    "unsupported_operation": "docs/wire.md: an agent operation on another role (or a fence "
    "operation on an auxiliary policy) is refused unsupported_operation",
    "malformed_request": "docs/wire.md: a malformed body is 422 malformed_request naming the "
    "bad field, and changes nothing",
    "unauthorized": "docs/wire.md: a missing or wrong bearer token is 401 unauthorized, and "
    "changes nothing",
}

_DUPLICATE_RULE = (
    "M2 (concurrent duplicate): the same (op, op_id) sent twice at once is one operation: the "
    "duplicate waits for the first and gets its reply (if the first failed, it runs on its "
    "own), so each copy gets the single request's reply (no 409 or 5xx of its own) and the "
    "state after is a single request's; "
    "fix: key in-flight control requests by (op, op_id) and let a duplicate await the "
    "first's reply, instead of refusing it or running the operation again"
)

_OP_RULES = {
    "prepare": "M2/M3-M5: prepare(X) runs from idle (or preparing with the same X); it is ready "
    "iff the role is quiescent (agent: nothing running or park_requested, nothing completed "
    "un-ACKed)",
    "commit": "M2: commit(X) runs from prepared with the same X",
    "resume": "M2: resume(X) is legal from any non-idle state whose active id is X, and from "
    "idle with any X above the high-watermark (it retires X)",
    "restore": "M2: restore(R) runs from idle (or restore_failed_paused with the same R); an "
    "artifact whose digest differs from expected_digest fails (restore_failed_paused)",
    "discard": "M2: discard(R, rollout) holds restored_paused with the same R",
    "begin": "M3: begin starts an execution (running) when the fence is idle and the key is new",
    "boundary": "M3: a turn boundary parks a park_requested execution; a running one goes on",
    "finish": "M3: a finished /run completes a running or park_requested execution and holds "
    "its result until an exact-receipt ACK",
    "ack": "M3: an exact-receipt ACK releases a completed result (idempotent); an unknown "
    "receipt is listed in `unknown` and releases nothing",
    "retire": "M3 (S17): retire tombstones a live execution, but a completed un-ACKed one is "
    "held (completed_unacknowledged): only an ACK releases a result",
    "status": "the state read through status differs from the reference participant's",
    "completions": "M3: completions lists exactly the completed-but-unACKed results",
}


def _differences(expected: dict[str, Any], actual: dict[str, Any]) -> tuple[str, ...]:
    keys = sorted(set(expected) | set(actual))
    return tuple(
        f"{k}: expected {expected.get(k)!r}, got {actual.get(k)!r}"
        for k in keys
        if expected.get(k) != actual.get(k)
    )


def _hint(op: str, expected: dict[str, Any], actual: dict[str, Any], after: str) -> str:
    """Which rule a difference breaks, in words (`after`: what the previous request did)."""
    if "unparseable" in actual:
        return "docs/wire.md: every reply body is the typed model of its route and status"
    if isinstance(actual.get("http"), int) and actual["http"] >= 500:
        return "docs/wire.md: no input is answered 5xx (a 5xx means the server itself failed)"
    both = "incarnation" in actual and "incarnation" in expected
    if both and expected["incarnation"] != actual["incarnation"]:
        return (
            "every reply carries the incarnation of the running process: it changed, so "
            "the server restarted during the run"
        )
    if op in ("status", "completions"):
        if after.startswith("duplicate:"):
            return _DUPLICATE_RULE
        if after == "failed_commit":
            return "M2: a commit answered failed returns the fence to prepared"
        if after == "failed_restore":
            return "M2: a restore answered failed leaves the fence restore_failed_paused"
        if after.startswith("refused:"):
            return f"a refused {after.removeprefix('refused:')} must change nothing"
        if after in _OP_RULES and after != op:
            return f"after {after}, {_OP_RULES[op]}; {_OP_RULES[after]}"
        return _OP_RULES[op]
    code = expected.get("code")
    if isinstance(code, str) and code in _CODE_RULES:
        return _CODE_RULES[code]
    return _OP_RULES.get(op, f"the reply to {op} differs from the reference participant's")


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
    return sorted(_compact(c) for c in items or ())


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


def _drives_executions(self: _Machine) -> bool:
    return self.run.executions


def _agent(self: _Machine) -> bool:
    return self.run.agent


def _not_agent(self: _Machine) -> bool:
    return not self.run.agent


def _has_post_ops(self: _Machine) -> bool:
    return bool(self.run.post_ops)


class _Machine(RuleBasedStateMachine):
    """One example: setup, then generated operations, each compared with the oracle."""

    run: ClassVar[_Run]

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
        self.texts: dict[int, str] = {}
        self.last = "setup"
        self.latest = 0
        self.fresh_keys = 0
        self.context: AbstractContextManager[Any] | None = None
        if not isinstance(run.server, str):
            self.context = run.server()
            started = self.context.__enter__()
        try:
            if self.context is not None:
                run.connect(started if isinstance(started, str) else str(started.url))
            assert run.config is not None and run.capabilities is not None
            self.oracle = new_participant(run.config, run.capabilities.incarnation)
            self.base = self._setup()
        except BaseException as error:
            self._stop()  # hypothesis calls teardown only on a machine that was built
            if isinstance(error, ConformanceSetupError):
                run.setup_error = error
                raise _Abort(error) from None
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
        violation = ConformanceViolation(rule, differences, tuple(self.steps))
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
            f"{rule} (after the previous sequence)", differences, steps
        )
        self.run.found(violation)
        self.run.stuck = True
        raise _Abort(violation)

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
        actuals = [self._actual(op, exchange) for exchange in exchanges]
        failed = [
            replay is None and actual != expected and _allowed_failure(op, expected, actual)
            for actual in actuals
        ]
        wrong = [a != expected and not f for a, f in zip(actuals, failed, strict=True)]
        order = sorted(range(len(exchanges)), key=lambda i: wrong[i])  # a wrong one last
        for number, i in enumerate(order, 1):
            note = _note(op, failed[i], number, len(exchanges))
            self.steps.append(KitStep(exchanges[i], expected, actuals[i], setup=setup, note=note))
        self.last = op if copies == 1 else f"duplicate:{op}"
        if any(wrong):
            actual = actuals[order[-1]]
            agree = all(other == actual for other in actuals)
            rule = _hint(op, expected, actual, self.last) if agree else _DUPLICATE_RULE
            self._fail(rule, _differences(expected, actual))
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
                        (f"recorded {_brief(earlier)}, replayed {_brief(exchange.reply)}",),
                    )
        if self._recorded(after, op, oracle_body) is not None:
            for exchange in answered[1:]:
                if exchange.reply != answered[0].reply:
                    self._fail(_DUPLICATE_RULE, _disagreement(answered[0].reply, exchange.reply))
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
        queries = ("status", "completions") if self.run.agent else ("status",)
        for op in queries:
            if op == "status":
                expected = self._expect(op, handle(self.oracle, "status")[1])
            else:
                expected = self._expect(op, _oracle_completions(self.oracle))
            exchange = self._send(op)
            actual = self._compare(op, exchange, expected, check=True)
            if actual != expected:
                self._fail(_hint(op, expected, actual, self.last), _differences(expected, actual))

    def _expect_refused(self, exchange: Exchange, expected: dict[str, Any], op: str) -> None:
        actual = self._compare(op, exchange, expected)
        if actual != expected:
            code = str(expected["code"])
            self._fail(_CODE_RULES[code], _differences(expected, actual))
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
    @rule(
        index=st.integers(0, len(_CONTROL_OPS) + len(_AGENT_OPS) - 1),
        flaw=st.sampled_from(["unknown_field", "wrong_type", "missing_field", "not_json"]),
    )
    def malformed(self, index: int, flaw: str) -> None:
        ops = self.run.post_ops
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


def _note(op: str, failed: bool, number: int, copies: int) -> str:
    """Why a step's reply may differ from the oracle's, and which copy it is."""
    allowed = f"the server failed the {op}: allowed; it must now be where M2 says"
    if copies == 1:
        return allowed if failed else ""
    copy = f"copy {number} of {copies}, sent at once: all in flight before any reply was read"
    return f"{copy}; {allowed}" if failed else copy


def _disagreement(one: Any, other: Any) -> tuple[str, ...]:
    """How two replies to the same request differ, field by field."""
    if not (isinstance(one, dict) and isinstance(other, dict)):
        return (f"one copy got {_brief(one)}, the other {_brief(other)}",)
    keys = sorted(set(one) | set(other))
    return tuple(
        f"{k}: one copy got {one.get(k)!r}, the other {other.get(k)!r}"
        for k in keys
        if one.get(k) != other.get(k)
    )


def _allowed_failure(op: str, expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    """The server failed a commit or restore the oracle ran successfully (its own reasons)."""
    wins = {"commit": ("committed", "failed"), "restore": ("restored", "failed")}.get(op)
    if wins is None or expected.get("http") != 200 or actual.get("http") != 200:
        return False
    return (expected.get("status"), actual.get("status")) == wins and all(
        expected.get(k) == actual.get(k) for k in ("participant", "incarnation", "op_id")
    )


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


def _oracle_completions(state: ParticipantState) -> CompletionsReply:
    role = state.role
    receipts: tuple[Receipt, ...] = ()
    if isinstance(role, AgentRole):
        receipts = tuple(
            Receipt(rollout_id=e.data.rollout_id, attempt=e.data.attempt, receipt=e.data.receipt)
            for e in role.completed()
        )
    return CompletionsReply(**stamp(state), receipts=receipts)
