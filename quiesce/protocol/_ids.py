"""Ordered operation ids: `ck-{epoch}-{seq}-step{N}` for checkpoints, `rs-…` for restores;
rollout ids: `{group_id}/{sibling}`.

Ids order by `(epoch, seq)`: `epoch` grows at every controller start (persisted) and `seq`
with every attempt, checkpoint or restore alike, so one counter orders both kinds. Because
ids are ordered, a participant needs only a high-watermark (the newest retired id) to refuse
every stale request in O(1) memory. A finished id is never reused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BeforeValidator, PlainSerializer

from quiesce.fsm import QuiesceError

__all__ = ["InvalidOpId", "OpId", "OpIdField", "OpKind", "group_of", "rollout_id"]

OpKind = Literal["ck", "rs"]
# No leading zeros: each id has exactly one spelling, so text equality is id equality.
_NUMBER = r"(0|[1-9]\d*)"
_PATTERN = re.compile(rf"(ck|rs)-{_NUMBER}-{_NUMBER}-step{_NUMBER}")


class InvalidOpId(QuiesceError, ValueError):
    """`text` is not an op id of the form `ck-{epoch}-{seq}-step{N}` or `rs-…`."""

    def __init__(self, text: object) -> None:
        self.text = text
        super().__init__(
            f"{text!r} is not an operation id; expected 'ck-<epoch>-<seq>-step<N>' "
            "(checkpoint) or 'rs-<epoch>-<seq>-step<N>' (restore), e.g. 'ck-1-3-step7'"
        )


@dataclass(frozen=True, slots=True, order=True)
class OpId:
    """An ordered operation id; compares by `(epoch, seq)` only.

    >>> OpId.parse("ck-1-10-step4") > OpId.parse("ck-1-9-step3")
    True
    """

    epoch: int
    seq: int
    step: int = field(compare=False)
    kind: OpKind = field(default="ck", compare=False)

    def __str__(self) -> str:
        return f"{self.kind}-{self.epoch}-{self.seq}-step{self.step}"

    @classmethod
    def parse(cls, text: object) -> OpId:
        """Parse `ck-1-3-step7`; anything else raises `InvalidOpId` naming the text."""
        if isinstance(text, OpId):
            return text
        match = _PATTERN.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise InvalidOpId(text)
        kind, epoch, seq, step = match.groups()
        return cls(int(epoch), int(seq), int(step), kind)  # type: ignore[arg-type]


OpIdField = Annotated[OpId, BeforeValidator(OpId.parse), PlainSerializer(str, return_type=str)]
"""An `OpId` inside a pydantic model: parsed from and serialised to its text form."""


def rollout_id(group_id: str, sibling: int) -> str:
    """A sibling's rollout id, the same for every attempt of it.

    >>> rollout_id("g-3", 1)
    'g-3/1'
    """
    return f"{group_id}/{sibling}"


def group_of(rollout: str) -> str:
    """The prompt group of a rollout id (the text before its last `/`).

    >>> group_of("g-3/1")
    'g-3'
    """
    return rollout.rpartition("/")[0]
