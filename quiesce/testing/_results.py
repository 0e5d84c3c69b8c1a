"""What a conformance run reports: each request sent (`KitStep`), the rule a server broke
(`ConformanceViolation`), the run's outcome (`ConformanceResult`) and its human report.

What lives here: the values the kit hands back and how they print. What it does not know:
how requests are chosen or judged (`_machine`), or what a rule says (`_rules`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quiesce.fsm import QuiesceError
from quiesce.protocol.wire import Role
from quiesce.testing._coverage import RunCoverage
from quiesce.testing._wire import Exchange, compact_json

__all__ = [
    "RESTART_METHOD",
    "ConformanceResult",
    "ConformanceSetupError",
    "ConformanceViolation",
    "KitStep",
    "brief",
]


RESTART_METHOD = "KILL"
"""The `method` of the pseudo-exchange a restart of the server is recorded as."""


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
            "curl": _by_hand(ex),
        }


class ConformanceViolation(QuiesceError):
    """The server broke `rule` at the last of `steps` (the whole sequence from the start of
    the example). `differences` lists `field: expected X, got Y`; `see` is where the rule is
    written down (a section of docs/protocol.md, or docs/wire.md). `state_diff` lists how
    the state the server reported after a wrong reply differs from the reference's (`status.`
    or `completions.` then `field: expected X, got Y`; empty when the state was not read or
    matches). `rule_id` is the rule's short name (what a report groups failures by and
    `--deviation` names), `shape` where it broke (the failing request's operation, or a
    race's operations in send order joined by `|`), and `rows` the table rows the reference
    fired for the failing request (machine, table, index, the state it fired in, input)."""

    def __init__(
        self,
        rule: str,
        differences: tuple[str, ...],
        steps: tuple[KitStep, ...],
        see: str = "",
        state_diff: tuple[str, ...] = (),
        *,
        rule_id: str = "",
        shape: str = "",
        rows: tuple[str, ...] = (),
    ) -> None:
        self.rule = rule
        self.differences = differences
        self.steps = steps
        self.see = see
        self.state_diff = state_diff
        self.rule_id = rule_id
        self.shape = shape
        self.rows = rows
        super().__init__(f"{rule}: {'; '.join(differences)} (after {len(steps)} requests)")

    @property
    def key(self) -> str:
        """What makes two failures distinct: the rule id and the first row the reference
        fired where it broke (`prepare M2 control_fence #3`; the rule id alone without one)."""
        row = self.rows[0].split(" #", 1) if self.rows else None
        if row is None:
            return self.rule_id
        return f"{self.rule_id} {row[0]} #{row[1].split(' ', 1)[0]}"

    @property
    def raced(self) -> bool:
        """True iff the failure was met in a race (its `shape` names several requests)."""
        return "|" in self.shape

    def explained_by(self, other: ConformanceViolation) -> bool:
        """True iff this failure, met in a race, is `other`, a failure of one request met
        alone: every fence (M2) row the reference fired for `other` fired in this race too,
        in whatever state (the race only reached the same difference another way)."""
        mine, theirs = _fence_rows(self.rows), _fence_rows(other.rows)
        return self.raced and not other.raced and bool(theirs) and theirs <= mine

    @property
    def failing_step(self) -> KitStep | None:
        """The step whose reply broke the rule: the last one whose actual differs from the
        expected (in a race, printed in send order, it need not be the last step)."""
        differing = [s for s in self.steps if s.expected is not None and s.expected != s.actual]
        return differing[-1] if differing else (self.steps[-1] if self.steps else None)

    @property
    def sequence(self) -> tuple[KitStep, ...]:
        """The requests a report prints: every one that can change state, and the failing
        one (passing `status`/`completions` reads change nothing and only add noise)."""
        last = self.steps[-1] if self.steps else None
        return tuple(
            s for s in self.steps if s is last or not (s.check or s.exchange.method == "GET")
        )


def _fence_rows(rows: tuple[str, ...]) -> frozenset[str]:
    """The M2 rows of `rows`, by table and index (`M2 control_fence #8`)."""
    return frozenset(" ".join(row.split(" ", 3)[:3]) for row in rows if row.startswith("M2 "))


class ConformanceSetupError(QuiesceError):
    """The kit cannot start: the server at `url` is unreachable, or is not what was asked
    for (`detail` says which)."""

    def __init__(self, url: str, detail: str) -> None:
        self.url = url
        self.detail = detail
        super().__init__(f"cannot check {url}: {detail}")


class ConformanceStopped(KeyboardInterrupt):
    """The run was asked to stop (`check_conformance`'s `stop` was set) and stopped before
    its next request, with no verdict. A `KeyboardInterrupt`: hypothesis then stops at
    once without recording the example it cut short (any other exception there is taken
    for a test outcome, and a cut example for inconsistent data generation), and a
    caller's `except Exception` lets it through."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(f"the check of {url} was stopped before it finished: no verdict")


@dataclass(frozen=True)
class ConformanceResult:
    """The outcome of a conformance run. `ok` is False iff `violation` is set (its `steps`
    are the shortest failing sequence found: hypothesis's shrink, then the kit's deletion
    of whole steps) or the run fired fewer than
    `min_coverage` percent of the role's live table rows (`coverage`, `covered`).
    `examples` counts the sequences run (shrinking included), `requests` the HTTP requests
    sent, `checks` the replies compared with the oracle, `allowed_failures` the
    commits/restores the server failed where the oracle succeeded (accepted, and checked to
    land where M2 says), `duplicates` the pairs of identical control requests sent at once
    (each copy counts in `requests` and `checks`), `races` the sets of different control
    requests sent overlapping (judged by linearizability), `restarts` the kills and
    restarts of the server (§6). `flaky` is True when the shortest sequence did not fail
    again on replay (the server is not deterministic); `shrunk` is False when the sequence
    is reported as found, and `not_shrunk_because` says why (a shared server without a
    reset hook, or one the failure left stuck). `coverage` is the rows of M2 and the role's
    table (M3-M5) the run fired (None when no example ran). `violations` lists every
    distinct failing rule found (up to `max_failures`, each shrunk on its own; `failures`),
    `tolerated` each declared deviation met, with how often."""

    url: str
    role: Role
    participant: str
    seed: int
    examples: int
    requests: int
    checks: int
    allowed_failures: int
    duplicates: int = 0
    races: int = 0
    restarts: int = 0
    violation: ConformanceViolation | None = None
    flaky: bool = False
    shrunk: bool = True
    not_shrunk_because: str = ""
    coverage: RunCoverage | None = None
    min_coverage: float = 0.0
    violations: tuple[ConformanceViolation, ...] = ()
    tolerated: tuple[tuple[str, int], ...] = ()
    max_failures: int = 1

    @property
    def failures(self) -> tuple[ConformanceViolation, ...]:
        """Every distinct failing rule the run found (up to `max_failures`), each shrunk on
        its own; the first is `violation`."""
        if self.violations:
            return self.violations
        return () if self.violation is None else (self.violation,)

    @property
    def covered(self) -> bool:
        """True iff the run fired at least `min_coverage` percent of the live rows."""
        return self.coverage is None or self.coverage.percent >= self.min_coverage

    @property
    def ok(self) -> bool:
        """True iff every checked reply matched the oracle and the run covered enough rows."""
        return self.violation is None and self.covered

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the `quiesce conform --json` document)."""
        failures = [
            {
                "rule": violation.rule,
                "rule_id": violation.rule_id,
                "shape": violation.shape,
                "rows": list(violation.rows),
                "differences": list(violation.differences),
                "flaky": self.flaky,
                "shrunk": self.shrunk,
                "not_shrunk_because": self.not_shrunk_because,
                "see": violation.see,
                "state_diff": list(violation.state_diff),
                "sequence": [s.to_json() for s in violation.sequence],
            }
            for violation in self.failures
        ]
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
            "races": self.races,
            "restarts": self.restarts,
            "min_coverage": self.min_coverage,
            "coverage": None if self.coverage is None else self.coverage.to_json(),
            "failure": failures[0] if failures else None,
            "failures": failures,
            "max_failures": self.max_failures,
            "tolerated": [{"deviation": d, "count": n} for d, n in self.tolerated],
        }

    def report(self) -> str:
        """The human report: a summary line, on failure the rule and the numbered sequence,
        then the row coverage."""
        head = (
            f"{self.role} {self.participant!r} at {self.url}: {self.examples} sequences, "
            f"{self.requests} requests, {self.checks} replies checked, "
            f"{self.duplicates} concurrent duplicates, {self.races} races, "
            f"{self.restarts} restarts, "
            f"{self.allowed_failures} allowed commit/restore failures (seed {self.seed})"
        )
        verdict = "PASS" if self.ok else "FAIL"
        lines = [f"{verdict}  {head}"]
        if self.tolerated:
            counted = ", ".join(f"{d} x{n}" for d, n in self.tolerated)
            lines.append(f"tolerated (declared deviations, met and stepped past): {counted}")
        failures = self.failures
        if len(failures) > 1:
            rules = ", ".join(v.rule_id for v in failures)
            lines.append(f"{len(failures)} distinct failing rules: {rules}")
        for number, violation in enumerate(failures, 1):
            if len(failures) > 1:
                lines.append(f"--- failure {number} of {len(failures)}: {violation.rule_id}")
            lines += self._violation_lines(violation)
        return "\n".join(lines + self._coverage_lines())

    def _violation_lines(self, violation: ConformanceViolation) -> list[str]:
        """The rule broken, where it is written, how the reply and the state differ, and
        the failing sequence, numbered, then again as curl commands."""
        lines = [f"rule: {violation.rule}"]
        if violation.rule_id:
            lines.append(f"rule id: {violation.rule_id} (at {violation.shape or '?'})")
        lines += [f"row: {row}" for row in violation.rows]
        if violation.see:
            lines.append(f"see: {violation.see}")
        lines += [f"  {d}" for d in violation.differences]
        if violation.state_diff:
            lines.append("state after the failing request (expected vs the server's status):")
            lines += [f"  {d}" for d in violation.state_diff]
        if self.flaky:
            lines.append("note: the sequence did not fail again on replay (flaky server)")
        if not self.shrunk:
            lines.append(f"note: not shrunk: {self.not_shrunk_because}")
        shown = violation.sequence
        which = "shortest failing" if self.shrunk else "failing"
        lines.append(f"{which} sequence ({len(shown)} requests):")
        for number, step in enumerate(shown, 1):
            lines += _format_step(number, step, last=step is shown[-1])
        if self.url.startswith(("http://", "https://")):  # not a participant in process
            lines.append(f"replay it by hand (export QUIESCE_URL={self.url} QUIESCE_TOKEN=...):")
            lines += [f"{n:3}. {_by_hand(step.exchange)}" for n, step in enumerate(shown, 1)]
        return lines

    def _coverage_lines(self) -> list[str]:
        """The row coverage: fired rows by index, the live rows not fired and the rows dead
        by design (with the reason), per table; and, below `min_coverage`, the verdict."""
        if self.coverage is None:
            return []
        lines = [self.coverage.summary()]
        if not self.covered:
            lines.append(
                f"coverage: {self.coverage.percent:.0f}% of the live rows fired, fewer than "
                f"--min-coverage {self.min_coverage:g}%; the rows not fired are listed below "
                "(more --examples or --steps reach more of them)"
            )
        for table in self.coverage.tables:
            name = f"{table.machine} {table.table}"
            fired = " ".join(row.split(" ", 1)[0] for row in table.fired) or "none"
            lines.append(f"  {name} fired: {fired}")
            lines += [f"  {name} not fired: {row}" for row in table.unfired]
        dead = [(t, row, why) for t in self.coverage.tables for row, why in t.dead]
        if dead:
            lines.append("  dead by design (cannot fire over the control routes; not counted):")
            lines += [f"    {t.machine} {t.table} {row}: {why}" for t, row, why in dead]
        return lines


def _format_step(number: int, step: KitStep, *, last: bool) -> list[str]:
    tag = "  [setup]" if step.setup else ""
    lines = [f"{number:3}. {step.exchange.request_line()}{tag}"]
    lines.append(f"     -> {step.exchange.status} {brief(step.exchange.reply)}")
    if step.note:
        lines.append(f"     ({step.note})")
    differs = step.note.startswith("raced") and step.expected != step.actual
    if (last or differs) and step.expected is not None:
        lines.append(f"     expected: {compact_json(step.expected)}")
        lines.append(f"     actual:   {compact_json(step.actual)}")
    return lines


def _by_hand(exchange: Exchange) -> str:
    """The request as a shell command (a restart of the kit's restart hook as a comment)."""
    if exchange.method == RESTART_METHOD:
        return "# kill the server and start it again (what --restart-cmd does)"
    return exchange.curl()


def brief(reply: Any) -> str:
    """A reply on one short line: long strings cut, the identity fields left out."""
    if not isinstance(reply, dict):
        text = str(reply)
        return text if len(text) <= 120 else text[:117] + "..."
    shown = {
        k: (v[:24] + "..." if isinstance(v, str) and len(v) > 27 else v)
        for k, v in reply.items()
        if k not in ("participant", "incarnation", "message")
    }
    return compact_json(shown)
