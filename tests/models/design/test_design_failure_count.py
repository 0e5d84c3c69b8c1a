"""The design model judges I7 with its own count of failed attempts (PROTOCOL.md §4, §5).

`max_consecutive_failures` counts attempts that failed after their retries. The design
model used to judge a `stopped` controller by M1's own counter, so M1 counting a failure
per failed abort (the bug `tests/models/implementation/test_failure_count.py` pins in the
implementation) stopped the run early with I7 still holding. The world now counts the
attempts' outcomes itself (`World.failed_attempts`), and I7 reads that count only.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import Any

import pytest

from quiesce.check import check
from quiesce.models import DesignModel, DesignParams
from quiesce.models.design import DesignTables
from quiesce.models.oracles import CAUSE_REASONS, SKIP_REASONS, disposition, reason_of
from quiesce.mutants import small
from quiesce.protocol import Cause, Classification, Disposition, classify
from quiesce.protocol.machines import CHECKPOINT
from tests.models.planted_bugs import count_every_failure

# The code's cause table, reached by name, as a bug in it would be.
causes = importlib.import_module("quiesce.protocol._causes")

# One failure is the budget; one fault lets the abort of the attempt that failed fail too
# (no in-attempt retry, so one lost request fails the call). Two triggers give the failing
# attempt a successor, whose own failure would be the second failed attempt.
_ONE_FAILED_ABORT = DesignParams(
    **small(triggers=2, faults=1, call_retries=0, max_consecutive_failures=1)
)


def _counting_every_failure() -> DesignTables:
    counting = CHECKPOINT.derive(
        "abort_failures_count", updates={"note_cause": count_every_failure}
    )
    return DesignTables().derive("abort_failures_count", checkpoint=counting)


def test_the_fixed_count_holds_in_the_configuration() -> None:
    result = check(DesignModel(_ONE_FAILED_ABORT), stop_on_violation=False)
    assert result.complete and result.violations == ()


def test_the_design_model_catches_a_failed_abort_counted_as_a_failed_attempt() -> None:
    model = DesignModel(_ONE_FAILED_ABORT, tables=_counting_every_failure())
    violation = check(model).violation("I7")
    assert violation is not None
    last: Any = violation.trace.states()[-1].state
    # M1 stopped believing two attempts failed in a row; one attempt failed.
    assert last.controller.m1.state == "stopped" and last.controller.m1.failures == 2
    assert last.world.failed_attempts == 1


def test_the_count_reads_the_spec_not_the_codes_cause_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A bug in the code's §4 table: a skip (the trainer moved) classified as a retryable
    # failure. The controller's tables, fed by that table, count it and stop; the world's
    # count asks the oracle (`reason_of`, `disposition`), so the stop is unearned: I7.
    params = DesignParams(**small(triggers=2, max_consecutive_failures=0))
    assert check(DesignModel(params), stop_on_violation=False).violations == ()
    skip = Cause.TRAINER_STATE_CHANGED
    wrong = Classification(skip, "participant_error", Disposition.RETRYABLE)
    monkeypatch.setattr(causes, "CAUSES", MappingProxyType({**causes.CAUSES, skip: wrong}))
    violation = check(DesignModel(params)).violation("I7")
    assert violation is not None
    last: Any = violation.trace.states()[-1].state
    assert last.controller.m1.state == "stopped" and last.world.failed_attempts == 0


def test_the_oracle_and_the_codes_cause_table_agree_where_the_spec_names_the_cause() -> None:
    # Two statements of §4, written apart: the oracle's by cause name, the code's `CAUSES`.
    unnamed = {c.value for c in Cause} - set(CAUSE_REASONS) - SKIP_REASONS
    assert unnamed == {"malformed_reply"}  # a reply that does not parse: §4 is silent
    for cause in Cause:
        if cause.value not in unnamed:
            code, reason = classify(cause), reason_of(cause.value)
            assert (code.reason, code.disposition.value) == (reason, disposition(reason))
    with pytest.raises(KeyError, match="malformed_reply"):
        reason_of("malformed_reply")
