"""Recovery levels (M8): the configuration vocabulary shared by the config and the controller.

What lives here: `RecoveryLevel`, finest to coarsest, and the error for an override that
would refine it. What it does not know: environments or discovery (the controller's
`lower_levels` computes each environment's levels).
"""

from __future__ import annotations

from enum import Enum

from quiesce.protocol._errors import ProtocolError

__all__ = ["OverrideRefines", "RecoveryLevel"]


class RecoveryLevel(Enum):
    """`rollout_recovery.target_level`, ordered finest (`TURN`) to coarsest (`PROMPT_GROUP`).

    >>> RecoveryLevel.TURN < RecoveryLevel.PROMPT_GROUP
    True
    """

    TURN = "turn"  # keep sealed siblings, resume unfinished ones from the last saved turn
    SIBLING = "sibling"  # keep sealed siblings, rerun unfinished ones from scratch
    PROMPT_GROUP = "prompt_group"  # discard the whole group (sealed siblings counted), rerun it

    @property
    def rank(self) -> int:
        """0 for the finest level, 2 for the coarsest."""
        return _RANK[self]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, RecoveryLevel):
            return NotImplemented
        return self.rank < other.rank

    def __le__(self, other: object) -> bool:
        if not isinstance(other, RecoveryLevel):
            return NotImplemented
        return self.rank <= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, RecoveryLevel):
            return NotImplemented
        return self.rank > other.rank

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, RecoveryLevel):
            return NotImplemented
        return self.rank >= other.rank

    def coarsest(self, other: RecoveryLevel) -> RecoveryLevel:
        """The coarser of `self` and `other`."""
        return self if self >= other else other

    @classmethod
    def parse(cls, text: str | RecoveryLevel) -> RecoveryLevel:
        """`"turn"` -> `RecoveryLevel.TURN`; an unknown name raises `ValueError` listing all."""
        if isinstance(text, RecoveryLevel):
            return text
        try:
            return cls(text)
        except ValueError:
            known = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown recovery level {text!r}; expected one of {known}") from None


_RANK = {RecoveryLevel.TURN: 0, RecoveryLevel.SIBLING: 1, RecoveryLevel.PROMPT_GROUP: 2}


class OverrideRefines(ProtocolError):
    """A per-environment override is finer than the target level: overrides only coarsen."""

    def __init__(self, environment: str, target: RecoveryLevel, override: RecoveryLevel) -> None:
        self.environment = environment
        self.target = target
        self.override = override
        super().__init__(
            f"override for environment {environment!r} asks for {override.value!r}, finer than "
            f"the target level {target.value!r}; overrides may only coarsen: use "
            f"{target.value!r} or coarser, or lower rollout_recovery.target_level"
        )
