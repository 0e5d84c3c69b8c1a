"""M7 deadline registry (`deadline_registry`): do rollout deadlines run?

What lives here: the registry's two states, the *set* of holders suspending it
(`checkpoint`, `train_switch`) and every prompt group's remaining budget. What it does not
know: clocks or groups' rollouts. Time comes in as the `now` of each input's argument, and
expiry comes out of a timer the registry arms itself: a group's deadline is the timer
`deadline_timer(group)` (`TimerKind.DEADLINE`), and its `TIMER_DUE` expires the group only
while the registry runs.

    +---------+  SUSPEND(h) / charge clocks, cancel timers  +-----------+  SUSPEND(h) / RESUME(h)
    | running | -----------------------------------------> | suspended | <----------------------+
    +---------+ <----------------------------------------- +-----------+ ------------------------+
     | START, STOP, TIMER_DUE      RESUME(h) [last_holder]    START, STOP: budgets only;
     |  (arm / cancel / expire)    / restart clocks, arm      TIMER_DUE: ignored (clock stopped)

Rules:
- the holder-set rule of M6 (`_holder_set`): suspended iff any holder holds; a repeated
  hold is a no-op; one holder's resume never restarts clocks another still holds (S2);
- time while suspended is not charged: on the first suspend every group's budget is
  charged with the time it ran (`now - since`) and its timer is cancelled; on the last
  resume `since := now` and every timer is armed again at `now + remaining` (S1);
- a `TIMER_DUE` while suspended is ignored: a timer cancelled at suspend may still be on its
  way, and the clock it measured has stopped.

The budgets are absolute seconds left at `since`, so the data stays small and does not grow:
one float per open group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from quiesce.fsm import Table, Value, each, on
from quiesce.protocol._timers import ArmTimer, CancelTimer, TimerKey, TimerKind
from quiesce.protocol.machines._holder_set import Holder, Holders, HolderSet

__all__ = [
    "ARG_EXAMPLES",
    "DEADLINE_REGISTRY",
    "DeadlineArg",
    "DeadlineExpired",
    "Deadlines",
    "RegistryInput",
    "RegistryState",
    "ResumeDeadlines",
    "SuspendDeadlines",
    "deadline_timer",
    "group_of_timer",
]


class RegistryState(Enum):
    RUNNING = "running"
    SUSPENDED = "suspended"


class RegistryInput(Enum):
    SUSPEND = "suspend"  # a holder stops the clocks (arg: Holder, now)
    RESUME = "resume"  # a holder lets go (arg: holder, now)
    START = "start"  # a prompt group gets its deadline (arg: group, now, budget_s)
    STOP = "stop"  # a prompt group finished or was retried: forget its deadline
    TIMER_DUE = "timer_due"  # the group's timer fired (arg: group, now)


@dataclass(frozen=True, slots=True)
class DeadlineArg:
    """The argument of every registry input: who, when. `key` is a `Holder` for SUSPEND and
    RESUME, a prompt group's id for START, STOP and TIMER_DUE."""

    key: Holder | str
    now: float
    budget_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Deadlines:
    """Holders, and per group the seconds left at `since` (sorted by group)."""

    holders: Holders = frozenset()
    budgets: tuple[tuple[str, float], ...] = ()
    since: float = 0.0

    def remaining(self, group: str) -> float | None:
        """Seconds left for `group` at `since`, or None if it has no deadline."""
        for name, left in self.budgets:
            if name == group:
                return left
        return None


# ----------------------------------------------------------------------------- the rows

_R, _S = RegistryState.RUNNING, RegistryState.SUSPENDED
_IN = RegistryInput

# fmt: off
# ruff: disable[E501] one row per line: the table reads across
_ROWS = (
    # The holder set (same rule as M6).
    on(_R, _IN.SUSPEND, _S, update="suspend_first", effects=("suspended", "cancel_all")),
    on(_R, _IN.RESUME, None),  # nothing held: a stray resume is a no-op
    on(_S, _IN.SUSPEND, None, update="add_holder"),
    on(_S, _IN.RESUME, _R, guard="last_holder", update="resume_last", effects=("resumed", "arm_all")),
    on(_S, _IN.RESUME, None, update="remove_holder"),
    # Per-group deadlines.
    on(_R, _IN.START, None, update="start_running", effects="arm_one"),
    on(_S, _IN.START, None, update="start_suspended"),
    on((_R, _S), _IN.STOP, None, update="forget", effects="cancel_one"),
    on(_R, _IN.TIMER_DUE, None, guard="known_group", update="forget", effects="expired"),
    on(_R, _IN.TIMER_DUE, None),  # the group already finished: a stale timer
)
# ruff: enable[E501]
# fmt: on

# S1: no clock runs while suspended, so nothing expires.
_IGNORED = each(_S, _IN.TIMER_DUE)


# ----------------------------------------------------------- effect values and helpers


@dataclass(frozen=True, slots=True)
class SuspendDeadlines:
    """`holder` stopped the rollout deadline clocks (M7)."""

    holder: Holder


@dataclass(frozen=True, slots=True)
class ResumeDeadlines:
    """The last holder, `holder`, released the deadline registry: clocks run again."""

    holder: Holder


@dataclass(frozen=True, slots=True)
class DeadlineExpired:
    """Effect: `group`'s deadline expired while the registry ran."""

    group: str


def deadline_timer(group: str) -> TimerKey:
    """The key of `group`'s deadline timer."""
    return TimerKey(TimerKind.DEADLINE, group)


def group_of_timer(key: TimerKey) -> str | None:
    """The group a deadline timer belongs to, or None for any other timer."""
    return key.subject if key.kind is TimerKind.DEADLINE else None


_HOLDERS: HolderSet[Deadlines] = HolderSet(
    holders=lambda data: data.holders,
    replace=lambda data, held: replace(data, holders=held),
    holder=lambda arg: Holder(arg.key),
)


def _with_budget(data: Deadlines, group: str, left: float | None) -> Deadlines:
    kept = [(name, b) for name, b in data.budgets if name != group]
    if left is not None:
        kept.append((group, left))
    return replace(data, budgets=tuple(sorted(kept)))


# ----------------------------------------------------------------------------- guards


def _known_group(value: Value[Any, Deadlines], arg: DeadlineArg) -> bool:
    return value.data.remaining(str(arg.key)) is not None


# ----------------------------------------------------------------------------- updates


def _suspend_first(data: Deadlines, arg: DeadlineArg) -> Deadlines:
    # Charge every group with the time its clock ran, then stop counting.
    ran = arg.now - data.since
    charged = tuple((group, left - ran) for group, left in data.budgets)
    return replace(_HOLDERS.add(data, arg), budgets=charged, since=arg.now)


def _resume_last(data: Deadlines, arg: DeadlineArg) -> Deadlines:
    # Clocks restart now: the suspended interval is never charged.
    return replace(_HOLDERS.remove(data, arg), since=arg.now)


def _start_running(data: Deadlines, arg: DeadlineArg) -> Deadlines:
    # Expressed at `since`, so the group's timer fires at now + budget_s.
    return _with_budget(data, str(arg.key), arg.budget_s + (arg.now - data.since))


def _start_suspended(data: Deadlines, arg: DeadlineArg) -> Deadlines:
    return _with_budget(data, str(arg.key), arg.budget_s)


def _forget(data: Deadlines, arg: DeadlineArg) -> Deadlines:
    return _with_budget(data, str(arg.key), None)


# ----------------------------------------------------------------------------- effects


def _timers(data: Deadlines, groups: Iterable[str]) -> tuple[ArmTimer, ...]:
    return tuple(
        ArmTimer(deadline_timer(g), data.since + left) for g, left in data.budgets if g in groups
    )


def _arm_all(value: Value[Any, Deadlines], _arg: DeadlineArg) -> tuple[Any, ...]:
    return _timers(value.data, [g for g, _ in value.data.budgets])


def _cancel_all(value: Value[Any, Deadlines], _arg: DeadlineArg) -> tuple[Any, ...]:
    return tuple(CancelTimer(deadline_timer(g)) for g, _ in value.data.budgets)


def _arm_one(value: Value[Any, Deadlines], arg: DeadlineArg) -> tuple[Any, ...]:
    return _timers(value.data, [str(arg.key)])


def _cancel_one(_value: Value[Any, Deadlines], arg: DeadlineArg) -> tuple[Any, ...]:
    return (CancelTimer(deadline_timer(str(arg.key))),)


def _expired(_value: Value[Any, Deadlines], arg: DeadlineArg) -> tuple[Any, ...]:
    return (DeadlineExpired(str(arg.key)),)


def _suspended(_value: Value[Any, Deadlines], arg: DeadlineArg) -> tuple[Any, ...]:
    return (SuspendDeadlines(Holder(arg.key)),)


def _resumed(_value: Value[Any, Deadlines], arg: DeadlineArg) -> tuple[Any, ...]:
    return (ResumeDeadlines(Holder(arg.key)),)


# ----------------------------------------------------------------------------- the table

DEADLINE_REGISTRY: Table[RegistryState, RegistryInput] = Table(
    "deadline_registry",
    doc="M7: rollout deadlines run iff no holder suspends them; suspended time is not charged.",
    states=RegistryState,
    inputs=RegistryInput,
    initial=_R,
    initial_data=Deadlines(),
    rows=_ROWS,
    ignored=_IGNORED,
    guards={"last_holder": _HOLDERS.is_last, "known_group": _known_group},
    updates={
        "add_holder": _HOLDERS.add,
        "remove_holder": _HOLDERS.remove,
        "suspend_first": _suspend_first,
        "resume_last": _resume_last,
        "start_running": _start_running,
        "start_suspended": _start_suspended,
        "forget": _forget,
    },
    effects={
        "suspended": _suspended,
        "resumed": _resumed,
        "arm_all": _arm_all,
        "cancel_all": _cancel_all,
        "arm_one": _arm_one,
        "cancel_one": _cancel_one,
        "expired": _expired,
    },
    invariants={
        "running_iff_no_holder": lambda v: (v.state is _R) == (not _HOLDERS.held(v.data)),
    },
)
"""M7 `deadline_registry`. Every effect is a tuple of controller effects (flattened by the
coordinator), because resuming re-arms one timer per group."""


def _args(keys: tuple[Holder | str, ...]) -> tuple[DeadlineArg, ...]:
    return tuple(
        DeadlineArg(key, now, budget_s)
        for key in keys
        for now in (0.0, 1.0, 5.0)
        for budget_s in (1.0, 10.0)
    )


_HOLDER_ARGS = _args((Holder.CHECKPOINT, Holder.TRAIN_SWITCH))
_GROUP_ARGS = _args(("g0", "g1"))
ARG_EXAMPLES: Mapping[RegistryInput, tuple[object, ...]] = {
    _IN.SUSPEND: _HOLDER_ARGS,
    _IN.RESUME: _HOLDER_ARGS,
    _IN.START: _GROUP_ARGS,
    _IN.STOP: _GROUP_ARGS,
    _IN.TIMER_DUE: _GROUP_ARGS,
}
"""Example arguments by input, for the sweeps (`quiesce.check.arg_examples`): holders for
the holder-set inputs, groups for the per-group ones, at a few times and budgets."""
