"""The mutant catalog: every known bug, derived once from the tables (scenario mutants, the
design mutants and generated mutants), and the checks that must kill it
(`quiesce mutants`).
"""

from __future__ import annotations

from quiesce.mutants._catalog import (
    MUTANTS,
    STEP_TIMEOUT_S,
    Mutant,
    Verdict,
    sample_generated,
    verify,
    watching_hangs,
)
from quiesce.mutants._design import DESIGN_MUTANTS, small
from quiesce.mutants._notes import survivor_note
from quiesce.mutants._pool import verify_many

__all__ = [
    "DESIGN_MUTANTS",
    "MUTANTS",
    "STEP_TIMEOUT_S",
    "Mutant",
    "Verdict",
    "sample_generated",
    "small",
    "survivor_note",
    "verify",
    "verify_many",
    "watching_hangs",
]
