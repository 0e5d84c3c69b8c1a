"""Latency profiles of `quiesce simulate`: how long the simulated world's work takes.

A `LatencyProfile` states every duration the virtual run draws or waits: a turn (the policy
call, then one tool call on the resources server), an optimizer step, each leg of a control
call, the snapshot write a committing participant does, the trainer's own checkpoint write,
and the protocol's timers fitted to those (the periodic snapshot attempt, the prepare and
call deadlines). All of it is virtual time: a profile of minutes-long training steps costs
no more wall time than one of milliseconds, only the number of events does.

Two profiles (`LATENCY_PROFILES`):
- `fast`: the simulation's own default, milliseconds everywhere, so a run of many steps
  takes seconds of wall time. Choosing it changes nothing: a seed gives the run it always
  gave;
- `review`: shaped like the settings of the original review's performance question
  (`save_period: 1`, a periodic snapshot attempt every 120 s): turns of seconds, optimizer
  steps of two minutes, control calls of milliseconds to tens of milliseconds, a snapshot
  write of seconds, the trainer's own checkpoint write of 30 s at every step (the review's
  `save_period: 1`, in both modes: with participant checkpointing on and off), and the
  protocol's default timers (`QuiesceConfig`).

>>> review = LATENCY_PROFILES["review"]
>>> review.turn_s, review.train_step_s, review.snapshot_attempt_interval_s
((1.2, 5.0), 120.0, 120.0)
>>> review.train_step(4), review.train_step(4, saves=True)
(120.0, 150.0)
>>> LatencyProfile.named("fast").snapshot_write_s
(0.0, 0.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from quiesce.fsm import QuiesceError

__all__ = ["LATENCY_PROFILES", "LatencyProfile", "UnknownLatencyProfile"]

Range = tuple[float, float]
"""`(low, high)` seconds, drawn uniformly from the virtual clock's seeded RNG."""


class UnknownLatencyProfile(QuiesceError, ValueError):
    """No latency profile is called `name`."""

    def __init__(self, name: object) -> None:
        self.name = name
        super().__init__(
            f"no latency profile {name!r}; choose one of {', '.join(sorted(LATENCY_PROFILES))}"
        )


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """How long the simulated world's work takes (seconds, virtual time).

    A turn is one policy call (`policy_call_s`, the generation) followed by one tool call
    on the resources server (`tool_call_s`); `turn_s` is their sum. An optimizer step over
    n finished prompt groups takes `train_step_s + n * train_step_per_group_s`, and
    `trainer_save_s` more when the trainer checkpoints at its end (its own checkpoint write:
    weights and optimizer state; every step at `save_period` 1, whether participant
    checkpointing is on or off). Each leg of a control call (request, reply) takes
    `control_call_s`. A commit on a participant that
    exports its state (recovery mode `export_restore`: the agents and resources servers of
    the default fleet; the stateless policy server writes nothing) takes `snapshot_write_s`
    more, between the request and the reply: the participant writes its snapshot artifact.

    The rest are the protocol's timers (`QuiesceConfig` fields of the same name), fitted to
    these latencies: `snapshot_attempt_interval_s` is the periodic trigger.
    """

    name: str
    policy_call_s: Range
    tool_call_s: Range
    train_step_s: float
    train_step_per_group_s: float
    trainer_save_s: float
    control_call_s: Range
    snapshot_write_s: Range
    snapshot_attempt_interval_s: float
    rollout_timeout_s: float
    prepare_timeout_s: float
    prepare_retry_interval_s: float
    control_timeout_s: float
    call_try_timeout_s: float | None

    def __post_init__(self) -> None:
        ranges = ("policy_call_s", "tool_call_s", "control_call_s", "snapshot_write_s")
        for what in ranges:
            low, high = getattr(self, what)
            if not 0.0 <= low <= high:
                raise ValueError(f"{what} must be a range 0 <= low <= high, got {(low, high)}")
        if self.train_step_s < 0 or self.train_step_per_group_s < 0:
            raise ValueError("training step times must be >= 0")
        if not self.trainer_save_s >= 0:  # NaN too
            raise ValueError(f"trainer_save_s must be >= 0, got {self.trainer_save_s}")

    @property
    def turn_s(self) -> Range:
        """The range of one turn: a policy call and a tool call."""
        return (
            round(self.policy_call_s[0] + self.tool_call_s[0], 9),
            round(self.policy_call_s[1] + self.tool_call_s[1], 9),
        )

    def train_step(self, groups: int, *, saves: bool = False) -> float:
        """How long an optimizer step over `groups` finished prompt groups takes; with
        `saves`, a step at the end of which the trainer writes its own checkpoint."""
        seconds = self.train_step_s + self.train_step_per_group_s * groups
        return seconds + self.trainer_save_s if saves else seconds

    def protocol(self) -> dict[str, Any]:
        """The protocol timers of this profile, as `QuiesceConfig` fields."""
        return {
            "snapshot_attempt_interval_s": self.snapshot_attempt_interval_s,
            "rollout_timeout_s": self.rollout_timeout_s,
            "prepare_timeout_s": self.prepare_timeout_s,
            "prepare_retry_interval_s": self.prepare_retry_interval_s,
            "control_timeout_s": self.control_timeout_s,
            "call_try_timeout_s": self.call_try_timeout_s,
        }

    def describe(self) -> str:
        """One line stating the profile's latencies."""

        def span(r: Range) -> str:
            return f"{r[0]:g}-{r[1]:g} s"

        write = span(self.snapshot_write_s) if self.snapshot_write_s[1] > 0 else "none"
        save = f"{self.trainer_save_s:g} s per saving step" if self.trainer_save_s > 0 else "none"
        return (
            f"{self.name}: turn {span(self.turn_s)}, training step {self.train_step_s:g} s "
            f"+ {self.train_step_per_group_s:g} s per group, trainer checkpoint write {save}, "
            f"control call {span(self.control_call_s)} per leg, participant snapshot write "
            f"{write}, "
            f"periodic snapshot attempt every {self.snapshot_attempt_interval_s:g} s"
        )

    @classmethod
    def named(cls, name: str) -> LatencyProfile:
        """The profile called `name` (`UnknownLatencyProfile` if there is none)."""
        try:
            return LATENCY_PROFILES[name]
        except KeyError:
            raise UnknownLatencyProfile(name) from None


_FAST = LatencyProfile(
    name="fast",
    # `WorkConfig`'s defaults: a turn of tens of milliseconds.
    policy_call_s=(0.02, 0.1),
    tool_call_s=(0.005, 0.02),
    train_step_s=0.05,
    train_step_per_group_s=0.01,
    # No trainer checkpoint write: the run is the one it always was.
    trainer_save_s=0.0,
    control_call_s=(0.001, 0.004),
    snapshot_write_s=(0.0, 0.0),
    # Round trips take milliseconds here: a try that waits half a second has timed out,
    # and its retries still fit the 2 s deadline (§4).
    snapshot_attempt_interval_s=4.0,
    rollout_timeout_s=120.0,
    prepare_timeout_s=5.0,
    prepare_retry_interval_s=0.2,
    control_timeout_s=2.0,
    call_try_timeout_s=0.5,
)

_REVIEW = LatencyProfile(
    name="review",
    # A turn of seconds: generation 1-4 s, one tool call 0.2-1 s.
    policy_call_s=(1.0, 4.0),
    tool_call_s=(0.2, 1.0),
    # Optimizer steps of minutes (two).
    train_step_s=120.0,
    train_step_per_group_s=0.0,
    # The trainer's own checkpoint write at save_period 1, in both modes (participant
    # checkpointing on and off); a modest figure for a policy of a few billion parameters
    # with optimizer state.
    trainer_save_s=30.0,
    # Control calls: 2-20 ms per leg, so 4-40 ms a round trip.
    control_call_s=(0.002, 0.02),
    # A participant's snapshot artifact (rollout continuations, environment state): seconds.
    snapshot_write_s=(1.0, 5.0),
    # The review's `snapshot_attempt_interval_s: 120`; the rest are QuiesceConfig's defaults.
    snapshot_attempt_interval_s=120.0,
    rollout_timeout_s=600.0,
    prepare_timeout_s=300.0,
    prepare_retry_interval_s=1.0,
    control_timeout_s=60.0,
    call_try_timeout_s=None,
)

LATENCY_PROFILES: Mapping[str, LatencyProfile] = MappingProxyType(
    {profile.name: profile for profile in (_FAST, _REVIEW)}
)
"""Every named profile: `fast` (the default) and `review`."""
