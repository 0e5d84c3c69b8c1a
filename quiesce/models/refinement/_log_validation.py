"""Refinement of a recorded run: a fence log checked against the design (`quiesce validate`).

What lives here: reading fence logs (`read_fence_logs`: a header line, then one line per
request a participant handled; anything else is `MalformedFenceLog`, naming the file and
the line), the design sizes a log is judged at (`design_size`), and the check itself:
`FenceLogJudge`, line by line in constant memory, for a file (`validate_fence_log`, which
returns a `LogVerdict`) or for a run as it logs (`JudgingFenceLog`, a sink). What it does
not know: how a line is written (`quiesce.adapters` `_fence_log`), or how one fence move is
judged against the design (`_refinement`: the view, the renaming of ids by rank,
`DesignSteps.check_fence_move`).

How a log maps onto the design. Fences are judged one at a time, so any number of
participants map onto the design's three; each is judged against the moves the design
makes of any participant's fence, not only of its role's (`DesignSteps.check_fence_move`
says why: a real policy is busy at a prepare, the design's never is). A participant's
lines are taken in the order they were written (a file top to bottom, the files in the
order given), and:
- its first fence (the `before` of its first line) must be an initial fence of the design:
  a log starts when the participant first starts;
- each line's move (`before` -> `after`) must be a move the design makes of that fence, or
  stutter (`before == after`: most requests, and every refusal, leave the fence alone);
- between two lines the fence may have moved with no line written: a restart rebuilds the
  fence from the journal (a commit caught in flight comes back failed), and a process
  killed between writing its journal and its line leaves the journal's move unlogged. So
  the gap (`after` of one line -> `before` of the next) is judged like a line, and
  counted apart (`unlogged`).

How the design's size is chosen. Every move a fence can make mentions at most two op ids
(a fence holds an active id and a high-watermark, and records results under those only;
a start activates one new id, a resume makes one id the watermark), so a design that mints
two ids names every move, whatever the log's length: `triggers=2`. One sibling, turn and
attempt, since the fence never reads the rollouts. What grows with the size is the fault
budget: some fence moves need several faults in one run (a restore needs a controller
crash first; a failed restore on top of it is a second fault). So the design is exhausted
at budget 1 first, and at the next budget only when a step maps to no move of the current
one, up to `MAX_FAULTS` (measured: 18, 20 and 21 distinct fence moves; 0.4, 3.3 and 18 s
CPU; the full §8 reference size at budget 1 makes the same 18, in 45 s). A step
that maps to no move at `MAX_FAULTS` is the first unmapped step. A budget above
`MAX_FAULTS` is refused (`DesignTooLarge`): the next budget is too costly to exhaust here.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from pydantic import ValidationError

from quiesce.adapters import (
    FENCE_LOG_VERSION,
    FenceLogHeader,
    FenceLogLine,
    FenceLogSink,
    FenceView,
)
from quiesce.fsm import QuiesceError
from quiesce.models.design import DesignParams
from quiesce.models.refinement._refinement import DesignSteps, Fence, fence_view
from quiesce.protocol.wire import Role

__all__ = [
    "MAX_FAULTS",
    "DesignTooLarge",
    "FenceLogJudge",
    "JudgingFenceLog",
    "LogVerdict",
    "LoggedLine",
    "MalformedFenceLog",
    "StepKind",
    "Unmapped",
    "design_size",
    "read_fence_logs",
    "validate_fence_log",
]

MAX_FAULTS = 3
"""The largest fault budget the design is exhausted at to judge a log (18 s CPU)."""


class MalformedFenceLog(QuiesceError):
    """Line `line` of the fence log `where` is not what the format allows (`problem`)."""

    def __init__(self, where: str, line: int, problem: str) -> None:
        self.where = where
        self.line = line
        self.problem = problem
        super().__init__(
            f"{where} line {line}: {problem}; a fence log is a header line, then one JSON "
            "object per request (docs/validate.md)"
        )


class DesignTooLarge(QuiesceError):
    """A fault budget of `faults` was asked for; the design is exhausted up to MAX_FAULTS."""

    def __init__(self, faults: int) -> None:
        self.faults = faults
        super().__init__(
            f"the design at fault budget {faults} is too large to exhaust for validation "
            f"(budget {MAX_FAULTS} takes about 18 s CPU); give a budget from 1 to {MAX_FAULTS}"
        )


class LoggedLine(NamedTuple):
    """One request line and where it was read (`line` counts from 1, the header included)."""

    where: str
    line: int
    record: FenceLogLine


def design_size(faults: int) -> DesignParams:
    """The design size a log is judged at with fault budget `faults` (see the module doc).

    >>> design_size(1).triggers, design_size(1).siblings, design_size(2).faults
    (2, 1, 2)
    """
    return DesignParams(
        siblings=1,
        turns=1,
        attempts=1,
        triggers=2,
        optimizer_steps=0,
        weight_sync=0,
        train_switch=0,
        faults=faults,
    )


# ---------------------------------------------------------------------------- reading


def read_fence_logs(paths: Sequence[Path]) -> Iterator[LoggedLine]:
    """Every request line of the fence logs at `paths`, in order, read lazily (a log of any
    length is judged in constant memory). Raises `MalformedFenceLog`, when it is reached,
    for the first line that is not a header or a request line (a file must start with a
    header), and `OSError` if a file cannot be read."""
    for path in paths:
        yield from _read(path)


def _read(path: Path) -> Iterator[LoggedLine]:
    where = str(path)
    with path.open("rb") as file:
        number = 0
        for number, raw in enumerate(file, 1):
            document = _json_object(where, number, raw)
            if "format" in document:
                _check_header(where, number, document)
            elif number == 1:
                raise MalformedFenceLog(where, 1, "no header line (a fence log starts with one)")
            else:
                yield LoggedLine(where, number, _parsed(FenceLogLine, where, number, document))
        if number == 0:
            raise MalformedFenceLog(where, 1, "the file is empty (no header line)")


def _json_object(where: str, number: int, raw: bytes) -> dict[str, Any]:
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise MalformedFenceLog(where, number, "not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise MalformedFenceLog(where, number, f"not JSON ({error.msg})") from None
    if not isinstance(document, dict):
        raise MalformedFenceLog(where, number, f"a JSON {type(document).__name__}, not an object")
    return document


def _check_header(where: str, number: int, document: dict[str, Any]) -> None:
    header = _parsed(FenceLogHeader, where, number, document)
    if header.version != FENCE_LOG_VERSION:
        raise MalformedFenceLog(
            where,
            number,
            f"format version {header.version}; this quiesce reads version {FENCE_LOG_VERSION}",
        )


_Model = TypeVar("_Model", FenceLogHeader, FenceLogLine)


def _parsed(model: type[_Model], where: str, number: int, document: dict[str, Any]) -> _Model:
    try:
        return model.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        at = ".".join(str(part) for part in first["loc"]) or "the line"
        raise MalformedFenceLog(where, number, f"{at}: {first['msg']}") from None


# ---------------------------------------------------------------------------- judging


class StepKind(Enum):
    """What a judged step of a log is."""

    REQUEST = "request"  # a line's own move, before -> after
    UNLOGGED = "unlogged"  # a move between two lines (a restart, a line that died)
    START = "start"  # a participant's first fence


@dataclass(frozen=True, slots=True)
class Unmapped:
    """The first step of a log that maps to no design step (`kind`), on line `line`
    (for an unlogged move: the line after it; for a start: the participant's first line);
    `reason` names the move with its ids renamed."""

    where: str
    line: int
    participant: str
    op: str
    op_id: str | None
    kind: StepKind
    before: FenceView
    after: FenceView
    reason: str

    def describe(self) -> dict[str, Any]:
        """The step as a JSON-ready mapping (both fences in the log's own form)."""
        return {
            **_fields(self),
            "kind": self.kind.value,
            "before": self.before.model_dump(mode="json"),
            "after": self.after.model_dump(mode="json"),
        }

    def explain(self) -> str:
        """Several lines for a person: where, what, and both fences."""
        request = f"{self.op}({self.op_id or ''})"
        what = {
            StepKind.REQUEST: request,
            StepKind.UNLOGGED: f"an unlogged move before {request}",
            StepKind.START: "the participant's first fence",
        }[self.kind]
        return (
            f"{self.where} line {self.line}: {self.participant}, {what}: {self.reason}\n"
            f"  before: {_shown(self.before)}\n  after:  {_shown(self.after)}"
        )


def _shown(view: FenceView) -> str:
    return json.dumps(view.model_dump(mode="json"), sort_keys=True)


@dataclass(frozen=True, slots=True)
class LogVerdict:
    """What `validate_fence_log` found: `lines` request lines of `participants`
    participants; `moves` lines that moved a fence as a design step does, `stutters` lines
    that left it alone, `unlogged` moves between lines (restarts) that map too, `restarts`
    incarnation changes; the design judged at `design` (`design_states` states); and the
    first `unmapped` step (None: the log refines the design)."""

    lines: int
    participants: int
    moves: int
    stutters: int
    unlogged: int
    restarts: int
    design: DesignParams
    design_states: int
    unmapped: Unmapped | None = field(default=None)

    @property
    def ok(self) -> bool:
        """Whether every step maps to a design step or stutters."""
        return self.unmapped is None

    def describe(self) -> dict[str, Any]:
        """The verdict as a JSON-ready mapping (`quiesce validate --json`)."""
        return {
            "ok": self.ok,
            **_fields(self),
            "design": self.design.describe(),
            "unmapped": None if self.unmapped is None else self.unmapped.describe(),
        }


def _fields(record: Unmapped | LogVerdict) -> dict[str, Any]:
    """A record's fields by name, in order (its `describe` then replaces some values)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


class _Step(NamedTuple):
    logged: LoggedLine
    kind: StepKind
    was: FenceView
    now: FenceView


@dataclass(slots=True)
class _Participant:
    role: Role
    incarnation: str
    fence: FenceView


def _fence(view: FenceView) -> Fence:
    return fence_view(view.state, view.active, view.high_watermark, view.recorded)


class FenceLogJudge:
    """Judges a fence log line by line, as it is read or as a run writes it: it keeps one
    fence per participant, never the lines. `judge` each line in order, then `verdict()`.
    Lines after the first unmapped step are counted, no longer judged.

    Raises `DesignTooLarge` if `max_faults` exceeds `MAX_FAULTS`."""

    def __init__(self, *, max_faults: int = MAX_FAULTS) -> None:
        if max_faults < 1:
            raise ValueError(f"max_faults must be at least 1, not {max_faults}")
        if max_faults > MAX_FAULTS:
            raise DesignTooLarge(max_faults)
        self.max_faults = max_faults
        self._design = _design(1)
        self._seen: dict[str, _Participant] = {}
        self._lines = self._moves = self._unlogged = self._restarts = 0
        self._unmapped: Unmapped | None = None

    def judge(self, logged: LoggedLine) -> None:
        """Take the next line: its participant's steps (its start, an unlogged move before
        it, its own move) are judged now. Raises `MalformedFenceLog` if the participant's
        role differs from its earlier lines'."""
        record = logged.record
        self._lines += 1
        known = self._seen.get(record.participant)
        if known is None:
            self._judged(_Step(logged, StepKind.START, record.before, record.before))
            known = self._seen[record.participant] = _Participant(
                record.role, record.incarnation, record.before
            )
        elif known.role is not record.role:
            raise MalformedFenceLog(
                logged.where,
                logged.line,
                f"participant {record.participant!r} is a {record.role.value} here and a "
                f"{known.role.value} on earlier lines (one name, one role)",
            )
        if known.incarnation != record.incarnation:
            self._restarts += 1
            known.incarnation = record.incarnation
        if known.fence != record.before:
            self._unlogged += 1
            self._judged(_Step(logged, StepKind.UNLOGGED, known.fence, record.before))
        if record.before != record.after:
            self._moves += 1
            self._judged(_Step(logged, StepKind.REQUEST, record.before, record.after))
        known.fence = record.after

    def _judged(self, step: _Step) -> None:
        if self._unmapped is not None:
            return
        reason = _reason(self._design, step)
        while reason and self._design.params.faults < self.max_faults:
            # Moves only grow with the budget: every step judged so far still maps.
            self._design = _design(self._design.params.faults + 1)
            reason = _reason(self._design, step)
        if reason:
            self._unmapped = _unmapped(step, reason)

    def verdict(self) -> LogVerdict:
        """What the lines judged so far come to."""
        return LogVerdict(
            lines=self._lines,
            participants=len(self._seen),
            moves=self._moves,
            stutters=self._lines - self._moves,
            unlogged=self._unlogged,
            restarts=self._restarts,
            design=self._design.params,
            design_states=self._design.design_states,
            unmapped=self._unmapped,
        )


class JudgingFenceLog(FenceLogSink):
    """A `FenceLogSink` that judges each line as a run records it (`FenceLogJudge`), its
    lines numbered as `FileFenceLog` writes them (the header is line 1) in `where`."""

    def __init__(self, where: str = "fence log", *, max_faults: int = MAX_FAULTS) -> None:
        self.where = where
        self.judge = FenceLogJudge(max_faults=max_faults)
        self._next_line = 2

    def record(self, line: FenceLogLine) -> None:
        self.judge.judge(LoggedLine(self.where, self._next_line, line))
        self._next_line += 1


def validate_fence_log(lines: Iterable[LoggedLine], *, max_faults: int = MAX_FAULTS) -> LogVerdict:
    """Judge `lines` (from `read_fence_logs`) against the design, exhausted at the
    smallest fault budget up to `max_faults` whose moves include the log's (see the module
    doc). Raises `MalformedFenceLog` if a participant's role changes between lines,
    `DesignTooLarge` if `max_faults` exceeds `MAX_FAULTS`."""
    judge = FenceLogJudge(max_faults=max_faults)
    for logged in lines:
        judge.judge(logged)
    return judge.verdict()


@functools.cache
def _design(faults: int) -> DesignSteps:
    # The design's moves at a size are a constant of this quiesce (its tables, which no
    # caller replaces: a planted bug is built into a model of its own), so a process
    # exhausts each budget once, not once per validated run.
    return DesignSteps(design_size(faults))


def _reason(design: DesignSteps, step: _Step) -> str:
    if step.kind is StepKind.START:
        if _fence(step.was) in design.initial_fences():
            return ""
        return "its first fence is no initial fence of the design (a log starts at the first start)"
    return design.check_fence_move(_fence(step.was), _fence(step.now))


def _unmapped(step: _Step, reason: str) -> Unmapped:
    record = step.logged.record
    return Unmapped(
        where=step.logged.where,
        line=step.logged.line,
        participant=record.participant,
        op=record.op,
        op_id=record.op_id,
        kind=step.kind,
        before=step.was,
        after=step.now,
        reason=reason,
    )
