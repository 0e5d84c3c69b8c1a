"""Timers: the one effect every room of the protocol emits.

A pure machine never reads a clock; it asks for a `TimerDue` input at an absolute time with
`ArmTimer` and forgets it with `CancelTimer`. The driver owns the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ArmTimer", "CancelTimer"]


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """Deliver `TimerDue(name)` at `at` (absolute); re-arming a name replaces its timer."""

    name: str
    at: float


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Forget timer `name` (a `TimerDue` already on its way is ignored by the core)."""

    name: str
