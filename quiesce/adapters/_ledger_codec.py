"""The recovery ledger as JSON: how the controller cut carries M8 into a snapshot.

What lives here: a lossless, compact encoding of `quiesce.protocol.Ledger` (every group
generation, every attempt, the discard counters) as plain JSON values, and its inverse.
What it does not know: what the ledger means. The cut is an opaque JSON value to the data
plane (`ControllerCut.ledger`); this module is the only place that reads it back.

Rows are positional lists, not objects: a cut with 100k attempts stays a few MB and
encodes in linear time. The driver puts the text form (`ledger_to_text`) into the cut.

>>> from quiesce.protocol import Ledger
>>> ledger, keys = Ledger().open_group("p0", 2, prompt="0", environment="agent-0")
>>> ledger_from_json(ledger_to_json(ledger.dispatch(keys[0]))) == ledger.dispatch(keys[0])
True
"""

from __future__ import annotations

import json
from typing import Any

from quiesce.fsm import QuiesceError, Value
from quiesce.protocol.controller import Ledger
from quiesce.protocol.controller.lowlevel import AttemptRecord, GroupRecord, LedgerCounters
from quiesce.protocol.machines import AttemptData, AttemptState, GroupData, GroupState

__all__ = ["CorruptLedger", "ledger_from_json", "ledger_to_json", "ledger_to_text"]

FORMAT = 1

_ATTEMPT_STATES = {s.value: s for s in AttemptState}
_GROUP_STATES = {s.value: s for s in GroupState}


class CorruptLedger(QuiesceError):
    """A cut's ledger does not decode; `field` names where, `reason` says why."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"the cut's ledger is corrupt [{field}]: {reason}")


def ledger_to_json(ledger: Ledger) -> dict[str, Any]:
    """`ledger` as a JSON-ready dict (positional rows; see `ledger_from_json`)."""
    groups = [
        [
            g.group_id,
            g.generation,
            g.prompt,
            g.environment,
            g.value.state.value,
            g.value.data.size,
            sorted(g.value.data.sealed),
            g.value.data.reopened,
        ]
        for g in ledger.groups
    ]
    attempts = [
        [
            a.group_id,
            a.generation,
            a.sibling,
            a.attempt,
            a.value.state.value,
            a.value.data.receipt,
            a.value.data.ack_owed,
            a.value.data.superseded,
            a.resume_from_turn,
        ]
        for a in ledger.attempts
    ]
    c = ledger.counters
    counters = [
        c.discarded_siblings,
        c.group_reruns,
        c.continuations_claimed,
        c.late_completions_dropped,
    ]
    return {"format": FORMAT, "groups": groups, "attempts": attempts, "counters": counters}


def ledger_to_text(ledger: Ledger) -> str:
    """`ledger_to_json` as compact JSON text: one string in the cut, so the cut's own model
    validates and serialises it in constant Python work instead of per row."""
    return json.dumps(ledger_to_json(ledger), separators=(",", ":"))


def ledger_from_json(document: Any) -> Ledger:
    """The `Ledger` encoded by `ledger_to_json` (or its text, `ledger_to_text`);
    `CorruptLedger` names the first bad field."""
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except json.JSONDecodeError as error:
            raise CorruptLedger("document", f"not valid JSON ({error})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CorruptLedger("format", f"expected a mapping with format {FORMAT}")
    try:
        rows = document["groups"]
        groups = tuple(
            GroupRecord(
                str(group_id),
                int(generation),
                str(prompt),
                str(environment),
                Value(
                    _GROUP_STATES[state], GroupData(int(size), frozenset(sealed), bool(reopened))
                ),
            )
            for group_id, generation, prompt, environment, state, size, sealed, reopened in rows
        )
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptLedger("groups", repr(error)) from None
    try:
        attempts = tuple(
            AttemptRecord(
                str(group_id),
                int(generation),
                int(sibling),
                int(attempt),
                Value(
                    _ATTEMPT_STATES[state],
                    AttemptData(receipt, bool(ack_owed), bool(superseded)),
                ),
                int(resume_from_turn),
            )
            for (
                group_id,
                generation,
                sibling,
                attempt,
                state,
                receipt,
                ack_owed,
                superseded,
                resume_from_turn,
            ) in document["attempts"]
        )
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptLedger("attempts", repr(error)) from None
    try:
        counters = LedgerCounters(*(int(n) for n in document["counters"]))
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptLedger("counters", repr(error)) from None
    return Ledger(groups, attempts, counters)
