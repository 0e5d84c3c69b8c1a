"""The mutant catalog (`quiesce mutants`): the known bugs, one list (`KNOWN_BUGS`) from which
the protocol model's scenario mutants (`MUTANTS`) and the design mutants (`DESIGN_MUTANTS`)
are both built, the mutants generated from every row of the tables, and the checks that
must kill them.
"""

from __future__ import annotations

from quiesce.mutants._bugs import KNOWN_BUGS, Kill, KnownBug
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
    "KNOWN_BUGS",
    "MUTANTS",
    "STEP_TIMEOUT_S",
    "Kill",
    "KnownBug",
    "Mutant",
    "Verdict",
    "sample_generated",
    "small",
    "survivor_note",
    "verify",
    "verify_many",
    "watching_hangs",
]
