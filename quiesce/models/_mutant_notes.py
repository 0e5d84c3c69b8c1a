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
    "checkpoint.retarget[22]->release_pending": "a failed abort waits in release_pending"
    " instead of abort_pending: both retry resume with the same id (S4), so the"
    " participants and the ledger see the same calls; only the outcome named after the"
    " retry differs, which no property checks",
}
"""Surviving reached generated mutant -> why no stage kills it."""


def survivor_note(name: str) -> str:
    """The justification of surviving mutant `name`, or a request to review it."""
    return SURVIVOR_NOTES.get(
        name, "not reviewed: a new survivor (add its note to quiesce/models/_mutant_notes.py)"
    )
