"""Known deviations: where a server knowingly differs from the spec, declared so the kit
tolerates the difference there and searches on past it.

What lives here: `Deviation` (`RULE[:SHAPE]`: a rule id of the kit's reports, and
optionally where: a failure's operation or race shape, or a part of one of its rows),
parsing one (`parse_deviation`, `UnknownDeviation` for a rule id the kit never reports),
reading a file of them (`read_deviations`), and `Tolerated`, how the judging steps out of
the request that showed one. What it does not know: how a difference is found or judged
(`_judge` asks `Deviation.covers`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from quiesce.fsm import QuiesceError
from quiesce.testing._results import ConformanceViolation
from quiesce.testing._rules import DUPLICATE_RULE, RACE_RULE, RULE_IDS

__all__ = [
    "Deviation",
    "Tolerated",
    "UnknownDeviation",
    "parse_all",
    "parse_deviation",
    "read_deviations",
]


class UnknownDeviation(QuiesceError, ValueError):
    """A declared deviation `text` names no rule the kit reports (or is empty)."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(
            f"deviation {text!r} names no rule of the kit; write RULE[:SHAPE] with RULE one "
            f"of {', '.join(RULE_IDS)}"
        )


@dataclass(frozen=True, slots=True)
class Deviation:
    """A difference a server knowingly has: failures under rule id `rule` (a report's
    `rule id`), where `shape` says (None: anywhere) are tolerated. `shape` matches a
    failure's `shape` (its operation, or a race's operations in send order joined by `|`)
    exactly, or any part of one of its `rows` (`prepare_not_ready`, `restoring + ...`); a
    deviation with a shape also covers a failure met in a race, or among concurrent
    duplicates, where such a row fired."""

    rule: str
    shape: str | None = None

    def covers(self, violation: ConformanceViolation) -> bool:
        """True iff `violation` is this deviation: its rule, where `shape` says; or a failure
        met in a race or among concurrent duplicates in which a row `shape` names fired (a
        deviating request leaves no reference state to judge the requests beside it by)."""
        in_rows = self.shape is not None and any(self.shape in row for row in violation.rows)
        concurrent = violation.raced or violation.rule_id == DUPLICATE_RULE.id
        if concurrent and in_rows and self.rule not in (RACE_RULE.id, DUPLICATE_RULE.id):
            return True
        if violation.rule_id != self.rule:
            return False
        return self.shape is None or self.shape == violation.shape or in_rows

    def __str__(self) -> str:
        return self.rule if self.shape is None else f"{self.rule}:{self.shape}"


def parse_deviation(text: str | Deviation) -> Deviation:
    """`RULE[:SHAPE]` as a `Deviation`; raises `UnknownDeviation` naming the valid rules.

    >>> parse_deviation("prepare:prepare_not_ready")
    Deviation(rule='prepare', shape='prepare_not_ready')
    """
    if isinstance(text, Deviation):
        return text
    rule, _, shape = text.strip().partition(":")
    if rule not in RULE_IDS:
        raise UnknownDeviation(text)
    return Deviation(rule, shape or None)


def read_deviations(path: str | Path) -> tuple[Deviation, ...]:
    """The deviations of a file: one `RULE[:SHAPE]` a line; blank lines and `#` comments
    are skipped. Raises `UnknownDeviation` (naming the line) for a rule the kit never
    reports, `UnicodeDecodeError` if it is not UTF-8 text, and `OSError` if the file cannot
    be read."""
    found = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            found.append(parse_deviation(text))
        except UnknownDeviation as error:
            raise UnknownDeviation(f"{path}:{number}: {text}") from error
    return tuple(found)


def parse_all(deviations: Iterable[str | Deviation]) -> tuple[Deviation, ...]:
    """Each of `deviations` parsed (`parse_deviation`)."""
    if isinstance(deviations, str):  # one deviation, not its characters
        deviations = (deviations,)
    return tuple(parse_deviation(d) for d in deviations)


class Tolerated(Exception):
    """The request judged last showed a tolerated difference (a declared deviation, or a
    failure this run already reported). `resynced`: the server is in a state the reference
    knows (the one before the request, or after it), so the example goes on from there;
    else the example ends."""

    def __init__(self, resynced: bool) -> None:
        super().__init__("tolerated")
        self.resynced = resynced
