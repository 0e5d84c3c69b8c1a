"""The policy and resources roles of a participant: M4 and M5 behind the fence.

What lives here: how the participant's fence drives a policy server's admission (M4) and
a resources server's freeze (M5), how each answers "ready?", and what each exports at
commit and imports at restore. What it does not know: the fence's rules (the participant
calls `close` when its fence starts a prepare or restore and `reopen` when it retires an
op), the wire, or time. Both share the agent role's method names, and each method that
steps a machine takes the `ParticipantRules` naming its table, so the participant treats
the three roles alike.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from quiesce.fsm import Value
from quiesce.protocol.machines import (
    POLICY_ADMISSION,
    RESOURCES,
    AdmissionData,
    Mutation,
    PolicyInput,
    PolicyState,
    RecoveryMode,
    ResourcesData,
    ResourcesInput,
    ResourcesState,
)
from quiesce.protocol.participant._agent_role import Readiness
from quiesce.protocol.participant._rules import ParticipantRules

__all__ = ["PolicyRole", "ResourcesRole"]

# Machine values are immutable, so one start value can be every role's default.
_ACCEPTING_POLICY = POLICY_ADMISSION.start()
_ACCEPTING_RESOURCES = RESOURCES.start()


@dataclass(frozen=True, slots=True)
class PolicyRole:
    """A policy server's admission (`policy_admission` value). Auxiliary servers are never
    closed by their fence: `fenced=False` keeps them accepting."""

    admission: Value[PolicyState, AdmissionData] = _ACCEPTING_POLICY
    fenced: bool = True

    def call_started(self, rules: ParticipantRules, call_id: str) -> tuple[PolicyRole, bool]:
        """A generation call arrived: `(role, admitted)`; not admitted = held as a waiter."""
        after, _ = rules.policy.step(self.admission, PolicyInput.CALL_STARTED, call_id)
        return replace(self, admission=after), after.state is PolicyState.ACCEPTING

    def call_finished(self, rules: ParticipantRules, call_id: str) -> PolicyRole:
        """An admitted call returned (the last one while draining pauses the server)."""
        after, _ = rules.policy.step(self.admission, PolicyInput.CALL_FINISHED, call_id)
        return replace(self, admission=after)

    def close(self, rules: ParticipantRules) -> PolicyRole:
        """Prepare or restore started: drain, then pause (auxiliary: stays accepting)."""
        if not self.fenced:
            return self
        after, _ = rules.policy.step(self.admission, PolicyInput.FENCE_PREPARE)
        return replace(self, admission=after)

    def reopen(self, rules: ParticipantRules) -> tuple[PolicyRole, tuple[str, ...]]:
        """Resume: accept again and admit every waiter; returns the released call ids."""
        waiters = self.admission.data.waiters
        after, _ = rules.policy.step(self.admission, PolicyInput.FENCE_RESUME)
        return replace(self, admission=after), waiters

    def readiness(self) -> Readiness:
        """Ready iff paused (no call in flight; new ones wait)."""
        if self.admission.state is PolicyState.PAUSED:
            return Readiness(True)
        return Readiness(False, (f"in_flight_calls:{self.admission.data.in_flight}",))

    def export(self) -> dict[str, Any] | None:
        """A policy saves nothing (its weights belong to the trainer's anchor)."""
        return None

    def install(self, rules: ParticipantRules, payload: dict[str, Any] | None) -> PolicyRole:
        """Nothing to import; a restore keeps admission closed until resume."""
        return self.close(rules)

    def durable(self) -> tuple[Any, ...]:
        """A policy keeps nothing durable beyond its fence."""
        return ()

    def summary(self, fence_idle: bool) -> tuple[str, int, int]:
        """`(role_state, live, completed_unacknowledged)` for status."""
        return self.admission.state.value, 0, 0


@dataclass(frozen=True, slots=True)
class ResourcesRole:
    """A resources server's freeze (`resources` value) and its declared recovery mode."""

    machine: Value[ResourcesState, ResourcesData] = _ACCEPTING_RESOURCES
    mode: RecoveryMode = RecoveryMode.RESTART_ONLY

    def mutation_started(
        self, rules: ParticipantRules, mutation_id: str, rollout_id: str
    ) -> tuple[ResourcesRole, bool]:
        """A call wants to change `rollout_id`'s state: `(role, admitted)`."""
        arg = Mutation(mutation_id, rollout_id)
        after, _ = rules.resources.step(self.machine, ResourcesInput.MUTATION_STARTED, arg)
        return replace(self, machine=after), after.state is ResourcesState.ACCEPTING

    def mutation_finished(
        self, rules: ParticipantRules, mutation_id: str, rollout_id: str
    ) -> ResourcesRole:
        """An admitted mutation is done: the rollout's revision grows by one."""
        arg = Mutation(mutation_id, rollout_id)
        after, _ = rules.resources.step(self.machine, ResourcesInput.MUTATION_FINISHED, arg)
        return replace(self, machine=after)

    def close(self, rules: ParticipantRules) -> ResourcesRole:
        """Prepare or restore started: wait for in-flight mutations, then freeze."""
        after, _ = rules.resources.step(self.machine, ResourcesInput.FENCE_PREPARE)
        return replace(self, machine=after)

    def reopen(self, rules: ParticipantRules) -> tuple[ResourcesRole, tuple[str, ...]]:
        """Resume: accept again and admit every waiting mutation (ids returned)."""
        waiters = self.machine.data.waiters
        after, _ = rules.resources.step(self.machine, ResourcesInput.FENCE_RESUME)
        return replace(self, machine=after), waiters

    def readiness(self) -> Readiness:
        """Ready iff frozen: no mutation in flight, every revision fixed."""
        if self.machine.state is ResourcesState.FROZEN:
            return Readiness(True)
        return Readiness(False, (f"in_flight_mutations:{self.machine.data.in_flight}",))

    def export(self) -> dict[str, Any] | None:
        """`export_restore` exports every rollout's revision; the others save nothing."""
        if self.mode is not RecoveryMode.EXPORT_RESTORE:
            return None
        return {"revisions": [list(pair) for pair in self.machine.data.revisions]}

    def install(self, rules: ParticipantRules, payload: dict[str, Any] | None) -> ResourcesRole:
        """Import a verified artifact into the frozen server (`restart_only`/`stateless`:
        the rollouts' state starts empty). Raises `ValueError` while mutations still run."""
        closed = self.close(rules)
        if closed.machine.state is not ResourcesState.FROZEN:
            raise ValueError(f"{closed.machine.data.in_flight} mutations still in flight")
        revisions = tuple((str(r), int(n)) for r, n in (payload or {}).get("revisions", ()))
        after, _ = rules.resources.step(closed.machine, ResourcesInput.IMPORT, revisions)
        return replace(closed, machine=after)

    def durable(self) -> tuple[Any, ...]:
        """Resources state is the server's own business; the journal keeps the fence only."""
        return ()

    def summary(self, fence_idle: bool) -> tuple[str, int, int]:
        """`(role_state, live, completed_unacknowledged)` for status."""
        return self.machine.state.value, 0, 0
