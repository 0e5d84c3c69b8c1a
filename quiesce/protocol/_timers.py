"""Timers: the one effect every room of the protocol emits, and the typed key that names one.

A pure machine never reads a clock; it asks for a `TimerDue` input at an absolute time with
`ArmTimer` and forgets it with `CancelTimer`. The driver owns the clock and hands the key
back unread: only the core looks inside a `TimerKey`, and it reads the kind and the subject,
never a prefix of a string.

>>> str(TimerKey(TimerKind.CALL_RETRY, "ck-1-3-step7", "agent-0"))
'call_retry:ck-1-3-step7/agent-0'
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["ArmTimer", "CancelTimer", "TimerKey", "TimerKind"]


class TimerKind(StrEnum):
    """What a timer is for. A `StrEnum`, so keys sort and print as their spec names."""

    DEADLINE = "deadline"  # a prompt group's rollout deadline (M7); subject: the group
    PREPARE_DEADLINE = "prepare_deadline"  # the end of an attempt's prepare phase (§3)
    PREPARE_RETRY = "prepare_retry"  # ask the not-ready participants of a prepare again (S10)
    ATTEMPT_RETRY = "retry"  # retry a pending abort or release (M1 abort/release_pending)
    RESTORE_RETRY = "restore_retry"  # ask again the restore-flow calls that failed (M9)
    CALL_RETRY = "call_retry"  # one call's backoff before it is sent again (§4 amended)
    BACKGROUND_RETRY = "background_retry"  # a background call's backoff; subject: op, about


@dataclass(frozen=True, slots=True, order=True)
class TimerKey:
    """The name of one timer: its `kind`, its `subject` (a group id, or an op id's text)
    and, for a timer of one call, the `participant` called."""

    kind: TimerKind
    subject: str
    participant: str = ""

    def __str__(self) -> str:
        where = f"/{self.participant}" if self.participant else ""
        return f"{self.kind}:{self.subject}{where}"


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """Deliver `TimerDue(name)` at `at` (absolute); re-arming a name replaces its timer."""

    name: TimerKey
    at: float


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Forget timer `name` (a `TimerDue` already on its way is ignored by the core)."""

    name: TimerKey
