"""Why each generated mutant that the stages reach and do not kill still survives.

What lives here: `SURVIVOR_NOTES`, one short justification per surviving reached generated
mutant of the last full run (`quiesce mutants --verify --all`), and `survivor_note`. A
survivor not listed here is new: `survivor_note` says so, and it deserves a look (a check
that can no longer fail, or one more note).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["SURVIVOR_NOTES", "survivor_note"]

SURVIVOR_NOTES: Mapping[str, str] = {}
"""Surviving reached generated mutant -> why no stage kills it."""


def survivor_note(name: str) -> str:
    """The justification of surviving mutant `name`, or a request to review it."""
    return SURVIVOR_NOTES.get(
        name, "not reviewed: a new survivor (add its note to quiesce/models/_mutant_notes.py)"
    )
