"""Why each generated mutant that the stages reach and do not kill still survives.

What lives here: `SURVIVOR_NOTES`, one short justification per surviving reached generated
mutant reviewed so far (`quiesce mutants --verify --all` lists every survivor with its
note), and `survivor_note`. A
survivor not listed here is new: `survivor_note` says so, and it deserves a look (a check
that can no longer fail, or one more note).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["SURVIVOR_NOTES", "survivor_note"]

_SAME_CALLS = (
    "abort and release are both resume with the same id, retried the same way (S4): the"
    " mutant swaps one for the other between releasing/aborting and their pending states,"
    " so every participant and the ledger see the protocol's calls; only the outcome"
    " reported differs, and no property of the implementation model checks it"
)

SURVIVOR_NOTES: Mapping[str, str] = {
    "checkpoint.retarget[9]->aborting": "a published snapshot is aborted instead of"
    " released: abort and release both resume every participant with the same id, so no"
    " participant or ledger property differs; only the reported outcome does, and no"
    " property of the implementation model ties a publish to a `completed` report",
    "checkpoint.retarget[14]->releasing": "after a restart finds the snapshot absent, the"
    " attempt is released instead of aborted: the row still calls abort (resume, same id),"
    " so the participants see the protocol's calls; the outcome says completed for an"
    " absent snapshot, which no property checks (a gap: `reported` is not tied to a"
    " published snapshot)",
    "checkpoint.retarget[22]->release_pending": _SAME_CALLS,
    "checkpoint.retarget[23]->abort_pending": _SAME_CALLS,
    "checkpoint.retarget[24]->releasing": _SAME_CALLS,
    "checkpoint.retarget[25]->releasing": _SAME_CALLS,
    "checkpoint.retarget[25]->committing": "a trigger while an abort is pending moves to"
    " committing (still calling abort): only the walks reach the row (a second trigger),"
    " and 300 walks never drove it on to a capture; the exhaustive S5 configuration"
    " (triggers=2, faults=1) is the stage that would",
}
"""Surviving reached generated mutant -> why no stage kills it."""


def survivor_note(name: str) -> str:
    """The justification of surviving mutant `name`, or a request to review it."""
    return SURVIVOR_NOTES.get(
        name, "not reviewed: a new survivor (add its note to quiesce/models/_mutant_notes.py)"
    )
