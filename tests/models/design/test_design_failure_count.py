"""The design model judges I7 with its own count of failed attempts (PROTOCOL.md §4, §5).

`max_consecutive_failures` counts attempts that failed after their retries. The design
model used to judge a `stopped` controller by M1's own counter, so M1 counting a failure
per failed abort (the bug `tests/models/implementation/test_failure_count.py` pins in the
implementation) stopped the run early with I7 still holding. The world now counts the
attempts' outcomes itself (`World.failed_attempts`), and I7 reads that count only.
"""

from __future__ import annotations

from typing import Any

from quiesce.check import check
from quiesce.models import DesignModel, DesignParams
from quiesce.models.design import DesignTables
from quiesce.mutants import small
from quiesce.protocol.machines import CHECKPOINT
from tests.models.planted_bugs import count_every_failure

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
