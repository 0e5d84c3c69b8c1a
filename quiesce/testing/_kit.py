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

One server, many examples (without a reset hook): every example begins where the last one
left the server. It reads `status`; aborts the active id if the
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

Races (M2, linearizability): the rule `race` sends DIFFERENT requests so that they overlap
(`WireClient.send_overlapping`: each sent while the earlier ones are in flight). The shapes
are generated from the tables (`_shapes`): each request that can be pending on the role (a
prepare with a near `deadline_at`, which a server may long-poll while an execution blocks
it; a commit; a restore) with each request that can overtake it (a resume of its id, a
commit, a discard) and each event that can release it (a boundary, finish, retire or ACK of
the blocking execution, the next checkpoint's prepare), two or three at once, in every
order of sending. Requests that overlap
in time may take effect in any order, the others in real-time order; some such order, run one
at a time through the oracle, must give every reply, and the `status` read after. The first
order that does becomes the oracle's state.

Restarts (§6, with a restart hook): the rule `restart` kills and restarts the server; it must
answer under a new incarnation with exactly the state its journal must keep (the oracle's
`journal_of`, recovered with `from_journal`), so whatever a reply reported before the kill
holds after it, and recorded results are replayed unchanged later (the rule `replay` re-sends
an earlier control request of the example). Some kills come while a prepare, commit or resume
is in flight (`_race.recoveries`): if its reply came, it must be durable; if not, the state
after is the one before it or the one after it, and re-sending it gets the recorded reply or
runs it now.

Shrinking: a shrunk sequence must replay from the state its original started in, so the kit
shrinks only with a fresh participant per example: a factory of servers, or a reset hook on a
shared URL (`reset=`, `--reset-url`). Without either, the failing sequence is reported as found
and `ConformanceResult.not_shrunk_because` says why. After hypothesis's shrinking, the kit
deletes whole recorded steps of the failing sequence while the rest still breaks the same
rule (`_program`: hypothesis's shrinker stops where deleting a step shifts how the later
choices decode).

In process (`check_participant`): a `Participant` object of the user's (the client interface
the driver calls) is checked without a server, its calls made through `_inprocess`'s httpx
transport, so everything above holds except the HTTP layer (no malformed or unauthenticated
requests); restarts need `restart=`, a callable that kills the participant and returns the
one recovered from its journal; a factory of participants is what shrinks there.

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

import secrets
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import HypothesisException
from hypothesis.stateful import get_state_machine_test

from quiesce.adapters import Participant
from quiesce.protocol.wire import Role
from quiesce.testing._coverage import coverage_of
from quiesce.testing._deviations import Deviation, parse_all
from quiesce.testing._machine import ConformanceMachine
from quiesce.testing._program import replay, shorten
from quiesce.testing._results import ConformanceResult, ConformanceSetupError, ConformanceViolation
from quiesce.testing._session import (
    NO_FACTORY,
    NO_RESET,
    STUCK,
    Abort,
    InProcessRestart,
    KitRun,
    Reset,
    Restart,
    Server,
    participant_restart_hook,
    reset_hook,
    restart_hook,
)
from quiesce.testing._shapes import released_shapes

__all__ = ["assert_conforms", "check_conformance", "check_participant"]


def check_conformance(
    server: Server,
    role: Role | str,
    token: str,
    *,
    examples: int = 100,
    steps: int = 25,
    seed: int | None = None,
    executions: bool = True,
    timeout: float = 10.0,
    reset: Reset | None = None,
    restart: Restart | None = None,
    min_coverage: float = 0.0,
    stop: threading.Event | None = None,
    deviations: Iterable[str | Deviation] = (),
    max_failures: int = 5,
) -> ConformanceResult:
    """Check a participant server (role `agent`, `policy` or `resources`) against the
    reference participant: `examples` generated sequences of up to `steps` operations each.
    Returns a `ConformanceResult` (never raises for a non-conforming server); raises
    `ConformanceSetupError` if the server cannot be reached or has another role.

    `server` is the URL of a running server (the examples share it: see the module
    docstring), or a factory of fresh servers (`lambda: LocalServer.start(...)`): one per
    example, so even a server that a bug leaves stuck is shrunk to its shortest sequence.
    `reset` gives every example of a shared server (a URL) a fresh participant: the URL of
    a route that resets it (POSTed with the bearer token) or a callable (`server.reset` of a
    `LocalServer`). Without a reset hook and a factory, a failing sequence cannot be shrunk
    (a shorter one would not start from the same state): it is reported as found, with the
    reason. `restart` kills and restarts the server (§6): a shell command (`--restart-cmd`)
    or a callable (`server.restart` of a `LocalServer`); the kit then restarts it between
    requests and during them, and checks that what was replied before is what the journal
    gives after, under a new incarnation. `executions=False` skips `begin`/`boundary`/`finish`
    (an agent that runs its own rollouts). `seed` makes the generated sequences reproducible
    (None: a random one, reported in the result). `min_coverage` (percent) fails a run that
    fired fewer of the role's live table rows (M2 and M3, M4 or M5;
    `ConformanceResult.coverage`). Setting `stop` (from another thread or a signal
    handler) ends the run before its next request: it raises `ConformanceStopped`, with
    no verdict. `deviations` (`RULE[:SHAPE]` texts or `Deviation`s; `read_deviations`
    reads a file of them) are differences the server knowingly has: each is tolerated where
    it occurs, counted in `ConformanceResult.tolerated`, and the search goes on past it
    (from the state the server reports, when the reference knows it; else with the next
    sequence); an unknown rule raises `UnknownDeviation`. The run reports every distinct
    failing rule it finds, up to `max_failures`, each shrunk on its own
    (`ConformanceResult.failures`).

    >>> check_conformance("http://127.0.0.1:1", "agent", "t")  # doctest: +SKIP
    """
    known = _role(role)
    declared = parse_all(deviations)
    hook = None if reset is None else reset_hook(reset, token, timeout)
    run = KitRun(server, token, known, executions and known is Role.AGENT, timeout, hook)
    run.deviations = declared
    if restart is not None:
        run.restart = restart_hook(restart, timeout)
    run.stop = stop
    if isinstance(server, str):
        _connect(run, server)
    unshrinkable = NO_RESET if isinstance(server, str) and hook is None else ""
    return _check(run, unshrinkable, examples, steps, seed, min_coverage, max_failures)


def check_participant(
    participant: Participant | Callable[[], Participant],
    role: Role | str,
    *,
    examples: int = 100,
    steps: int = 25,
    seed: int | None = None,
    executions: bool = True,
    timeout: float = 10.0,
    min_coverage: float = 0.0,
    restart: InProcessRestart | None = None,
    deviations: Iterable[str | Deviation] = (),
    max_failures: int = 5,
) -> ConformanceResult:
    """`check_conformance` for a `Participant` object in this process (the client interface
    the driver calls, docs/embedding.md), without a server: each request the kit would send
    over HTTP is handed to `participant.call(op, request, deadline_at)`, and the reply (or
    `CallFailedError`, a 503; any other exception, a 500) judged exactly as a server's.

    `participant` is one object (the examples share it, as they share a URL; a failing
    sequence is then reported as found, and `not_shrunk_because` says why) or a factory,
    a callable returning a new participant: one per example, so a failure is shrunk to its
    shortest sequence. Bearer tokens and malformed bodies belong to an HTTP server, not to
    the object, so those requests are not sent. `restart` checks durability (§6) as
    `check_conformance`'s does: given the participant to kill, it kills it (calls in flight
    on it may fail or never answer) and returns the participant recovered from its journal,
    under a new incarnation; the kit calls it between requests and while one is in flight
    (a long-polling prepare too). The other options (`deviations`, `max_failures`
    included) are `check_conformance`'s.

    >>> check_participant(lambda: MyParticipant(), "resources", examples=10)  # doctest: +SKIP
    >>> check_participant(make, "agent", restart=lambda old: old.recovered())  # doctest: +SKIP
    """
    known = _role(role)
    agent = executions and known is Role.AGENT
    declared = parse_all(deviations)
    if restart is not None and not callable(restart):
        raise TypeError(
            f"restart must be a callable taking the killed Participant and returning the "
            f"recovered one, not {type(restart).__name__}"
        )
    if isinstance(participant, Participant):
        run = KitRun(participant, "", known, agent, timeout, over_http=False)
        run.deviations = declared
        if restart is not None:
            run.restart = participant_restart_hook(run, restart)
        _connect(run, participant)
        return _check(run, NO_FACTORY, examples, steps, seed, min_coverage, max_failures)
    if not callable(participant):
        raise TypeError(
            f"check_participant needs a Participant or a callable returning one, not "
            f"{type(participant).__name__}"
        )
    make = participant

    def fresh() -> nullcontext[Participant]:
        made = make()
        if not isinstance(made, Participant):
            raise TypeError(
                f"the factory given to check_participant returned a {type(made).__name__}, "
                "not a Participant"
            )
        return nullcontext(made)

    run = KitRun(fresh, "", known, agent, timeout, over_http=False)
    run.deviations = declared
    if restart is not None:
        run.restart = participant_restart_hook(run, restart)
    return _check(run, "", examples, steps, seed, min_coverage, max_failures)


def _role(role: Role | str) -> Role:
    if role not in tuple(Role):
        raise ValueError(f"role must be one of {', '.join(Role)}, not {role!r}")
    return Role(role)


def _connect(run: KitRun, target: str | Participant) -> None:
    """Connect a run whose examples share one server (discovery fails here, not later)."""
    try:
        run.connect(target)
    except ConformanceSetupError:
        run.disconnect()
        raise


def _check(
    run: KitRun,
    unshrinkable: str,
    examples: int,
    steps: int,
    seed: int | None,
    min_coverage: float,
    max_failures: int = 1,
) -> ConformanceResult:
    """Search for failures, up to `max_failures` distinct ones (`ConformanceViolation.key`:
    the rule id and the row where it broke): each search
    runs the machine for `examples` sequences and shrinks the first failure it meets (unless
    `unshrinkable` says why it cannot be: the examples share a participant without a way to
    reset it); the next search steps past the rules already found, so one failure never
    hides another. A failure met in a race that a failure of one request explains
    (`ConformanceViolation.explained_by`) is not reported apart."""
    if not 0.0 <= min_coverage <= 100.0:
        raise ValueError(f"min_coverage is a percentage from 0 to 100, not {min_coverage!r}")
    if max_failures < 1:
        raise ValueError(f"max_failures is at least 1, not {max_failures!r}")
    chosen = seed if seed is not None else secrets.randbelow(1 << 32)
    machine = type("ConformanceMachine", (ConformanceMachine,), {"run": run})
    found: list[ConformanceViolation] = []
    flaky, unshrunk = False, ""
    try:
        for search in range(2 * max_failures):  # a race may only meet one found again
            try:
                violation, was_flaky, why = _search(
                    run, machine, unshrinkable, examples, steps, chosen + search
                )
            except _Unsearchable:
                if not found:
                    raise
                break  # a later search met a sequence answered two ways: report what is found
            if violation is None:
                break
            found = _with(found, violation)
            flaky, unshrunk = flaky or was_flaky, unshrunk or why
            run.known |= {violation.key}
            if run.stuck or len(found) >= max_failures:  # nothing more to search for
                break
        if not run.stuck and len(found) < max_failures:
            for violation in _sweep(run, machine):
                if violation.key not in run.known:
                    found = _with(found, violation)
                    run.known |= {violation.key}
                    if len(found) >= max_failures:
                        break
    finally:
        run.disconnect()
    return ConformanceResult(
        url=run.url,
        role=run.role,
        participant=run.config.name if run.config else "?",
        seed=chosen,
        examples=run.examples,
        requests=run.requests,
        checks=run.checks,
        allowed_failures=run.allowed_failures,
        duplicates=run.duplicates,
        races=run.races,
        restarts=run.restarts,
        violation=found[0] if found else None,
        flaky=flaky,
        shrunk=not unshrunk,
        not_shrunk_because=unshrunk,
        coverage=coverage_of(run.role, run.config.fenced, run.rows) if run.config else None,
        min_coverage=min_coverage,
        violations=tuple(found),
        tolerated=tuple(sorted(run.tolerated.items())),
        max_failures=max_failures,
    )


class _Unsearchable(ConformanceSetupError):
    """A search met a sequence the server answered differently on two runs, and no failure."""


def _search(
    run: KitRun,
    machine: type[ConformanceMachine],
    unshrinkable: str,
    examples: int,
    steps: int,
    seed: int,
) -> tuple[ConformanceViolation | None, bool, str]:
    """One hypothesis search: the (shrunk) violation it found, whether it was flaky, and
    why it was not shrunk ("" if it was)."""
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
            phases=(Phase.explicit, Phase.generate)
            if unshrinkable
            else (Phase.explicit, Phase.generate, Phase.shrink),
        ),
    )
    run.best, run.last_failure = None, None
    outcome: BaseException | None = None
    try:
        hypothesis_seed(seed)(test)()
    except (Exception, Abort, BaseExceptionGroup) as error:  # the minimal failure
        outcome = error
    if run.setup_error is not None:
        raise run.setup_error
    violation, flaky, unshrunk = None, False, ""
    if run.stuck:
        violation, unshrunk = run.best, STUCK
    elif isinstance(outcome, ConformanceViolation):
        violation = outcome
        if not unshrinkable:
            violation = _shorten(run, machine, violation)
    elif outcome is not None:  # FlakyFailure & co: a replay did not fail the same way
        violation, flaky = run.best, True
        if violation is None and isinstance(outcome, HypothesisException):
            # No failure to show: hypothesis saw the same choices run differently (a server
            # whose answers vary between runs of one sequence), which it cannot search.
            raise _Unsearchable(
                run.url,
                f"the run stopped on {_first_line(outcome)} with no failure found: the "
                f"server answered one sequence differently on two runs; rerun with another "
                f"--seed, and report it if it recurs",
            ) from None
        if violation is None:
            raise outcome
    if violation is not None and unshrinkable:
        unshrunk = unshrinkable
    return violation, flaky, unshrunk


def _with(
    found: list[ConformanceViolation], violation: ConformanceViolation
) -> list[ConformanceViolation]:
    """`found` and `violation`, less every failure another of them explains (a race that a
    failure of one request explains is not reported apart)."""
    every = [*found, violation]
    return [v for v in every if not any(v.explained_by(o) for o in every)]


def _sweep(run: KitRun, machine: type[ConformanceMachine]) -> Iterator[ConformanceViolation]:
    """After the search, each of the role's overtaken-then-released races (`_shapes`) once,
    each on a fresh example, whatever the seed drew: the violations they meet, each a setup
    and one race (already as short as it gets). A hypothesis search of 100 examples draws a
    few dozen distinct races, so a race bug one shape shows escaped some seeds. A setup that
    breaks ends the sweep."""
    rule = ConformanceMachine.overtaken_then_released.__name__
    for base in range(len(released_shapes(run.role, run.executions))):
        try:
            found = replay(machine, ((rule, {"base": base}),))
        except Abort:
            return
        if found is not None:
            yield found[0]


def _shorten(
    run: KitRun, machine: type[ConformanceMachine], violation: ConformanceViolation
) -> ConformanceViolation:
    """`violation` after the kit's own pass over hypothesis's shrunk sequence: its steps
    deleted one at a time while the rest still fails (`_program`). A setup that breaks
    during the pass ends it with hypothesis's sequence."""
    failure = run.last_failure
    if failure is None or failure[0] is not violation:
        return violation
    try:
        return shorten(machine, failure[1], violation)
    except Abort:
        return violation


def assert_conforms(
    server: Server, role: Role | str, token: str, *, examples: int = 50, **options: Any
) -> ConformanceResult:
    """`check_conformance`, raising `AssertionError` with the report (the shortest failing
    sequence) when the server does not conform; returns the result when it does.

    >>> assert_conforms("http://127.0.0.1:1", "policy", "t")  # doctest: +SKIP
    """
    result = check_conformance(server, role, token, examples=examples, **options)
    if not result.ok:
        raise AssertionError(result.report())
    return result


def _first_line(error: BaseException) -> str:
    """`Type (first line)` of `error`, and of what it groups (hypothesis's FlakyFailure
    holds the errors a replay did not raise again)."""
    text = str(error).strip()
    named = f"{type(error).__name__} ({text.splitlines()[0]})" if text else type(error).__name__
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        named += f", after {_first_line(error.exceptions[0])}"
    return named
