"""A Hypothesis state machine over the *real* runtime: driver, in-memory fleet, virtual clock.

What lives here: `SystemMachine`, a `RuleBasedStateMachine` whose rules are the commands of
a `SystemRun` (`_system_run`: the environment actions of PROTOCOL.md §8), with §5's
invariants and refinement checked after every rule and I1, I7 at teardown; and
`system_machine(hooks)`, the machine for a mutant (or with refinement off). What it does
not know: how a command runs or what a check looks at (`_system_run`). The explorer
enumerates every schedule of a tiny model; this machine samples long schedules of the real
code (any number of groups, turns, faults and restarts, real timers).

>>> from hypothesis.stateful import run_state_machine_as_test
>>> from quiesce.models import SystemMachine
>>> run_state_machine_as_test(SystemMachine)  # doctest: +SKIP
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from quiesce.adapters import CONTROL_OPS, FaultKind
from quiesce.models.implementation import Hooks
from quiesce.models.refinement._system_ledger import SystemViolation
from quiesce.models.refinement._system_run import SystemRun, system_config
from quiesce.protocol.controller import PeriodElapsed
from quiesce.protocol.participant import ParticipantOp
from quiesce.protocol.wire import Role

__all__ = ["SystemMachine", "system_machine"]

_FAULTS = (
    FaultKind.DROP_REQUEST,
    FaultKind.DROP_REPLY,
    FaultKind.SERVER_ERROR,
    FaultKind.TIMEOUT,
    FaultKind.REDELIVER,
)
_FAULT_OPS = tuple(sorted(CONTROL_OPS - {ParticipantOp.DISCARD}, key=lambda op: op.value))


class SystemMachine(RuleBasedStateMachine):
    """Rules over a `SystemRun`; invariants I2-I6, I8 and refinement after every rule, I1
    and I7 at teardown (the faults stop and the world drains). `hooks` (class attribute)
    runs a mutant, `refine` (class attribute) judges every fence move against the design;
    `system_machine(hooks, refine=...)` builds such a subclass."""

    hooks: Hooks | None = None
    refine = True
    max_faults = 6
    max_crashes = 2
    max_groups = 6

    def __init__(self) -> None:
        super().__init__()
        self.run: SystemRun | None = None
        self.broken = False

    @initialize(
        seed=st.integers(0, 2**16),
        rollout_timeout_s=st.sampled_from([1.5, 4.0, 30.0]),
        turns=st.integers(1, 4),
    )
    def start(self, seed: int, rollout_timeout_s: float, turns: int) -> None:
        """A fresh system: one server per role, a deadline drawn short or long."""
        self.run = SystemRun(
            seed,
            config=system_config(rollout_timeout_s),
            hooks=self.hooks,
            turns=turns,
            refine=self.refine,
        )

    @property
    def _run(self) -> SystemRun:
        assert self.run is not None
        return self.run

    def _steady(self) -> bool:
        driver = None if self.run is None else self.run.driver
        return driver is not None and driver.stopped is None

    @precondition(lambda self: self._steady() and self._run.world.budget < self.max_groups)
    @rule(size=st.integers(1, 3))
    def open_group(self, size: int) -> None:
        """The dataloader opens a group."""
        self._run.open_group(size)

    @precondition(lambda self: self.run is not None)
    @rule(seconds=st.sampled_from([0.01, 0.1, 0.5, 2.0, 5.0]))
    def advance(self, seconds: float) -> None:
        """Rollouts make progress; calls, timers and deadlines run."""
        self._run.advance(seconds)

    @precondition(lambda self: self._steady())
    @rule()
    def periodic_trigger(self) -> None:
        """The periodic checkpoint trigger."""
        self._run.submit(PeriodElapsed())

    @precondition(lambda self: self._steady() and self._run.world.training is None)
    @rule()
    def optimizer_begin(self) -> None:
        """The trainer starts an optimizer step over queued groups."""
        self._run.optimizer_begin()

    @precondition(lambda self: self._steady() and self._run.world.training is not None)
    @rule()
    def optimizer_end(self) -> None:
        """The trainer commits; its boundary triggers a checkpoint."""
        self._run.optimizer_end()

    @precondition(lambda self: self._steady())
    @rule()
    def train_switch(self) -> None:
        """The train switch begins, or ends if it is on."""
        self._run.toggle_train_switch()

    @precondition(lambda self: self._steady())
    @rule()
    def weight_sync(self) -> None:
        """A weight sync begins, or ends if one is on."""
        self._run.toggle_weight_sync()

    @precondition(lambda self: self._steady() and self._run.world.faults < self.max_faults)
    @rule(
        role=st.sampled_from(Role),
        kind=st.sampled_from(_FAULTS),
        op=st.sampled_from(_FAULT_OPS),
    )
    def fault(self, role: Role, kind: FaultKind, op: ParticipantOp) -> None:
        """The next `op` call to the `role` server suffers `kind`."""
        self._run.inject(f"{role}-0", kind, op)

    @precondition(lambda self: self._steady() and self._run.world.crashes < self.max_crashes)
    @rule(role=st.sampled_from(Role))
    def crash_participant(self, role: Role) -> None:
        """A participant crashes and restarts from its journal."""
        self._run.crash_participant(f"{role}-0")

    @precondition(lambda self: self._steady() and self._run.world.restarts < self.max_crashes)
    @rule()
    def restart_controller(self) -> None:
        """The controller crashes and a new one restores from the durable store."""
        self._run.restart_controller()

    @invariant()
    def safety(self) -> None:
        """I2-I6, I8 (I3 whenever the controller is idle) and refinement."""
        if self.run is not None:
            try:
                self.run.check()
            except SystemViolation:
                self.broken = True
                raise

    def teardown(self) -> None:
        """I7 and I1: drain the world, then close the run."""
        run = self.run
        if run is None:
            return
        try:
            if not self.broken and run.driver is not None and run.driver.stopped is None:
                run.drain()
        finally:
            run.close()


def system_machine(
    hooks: Hooks | None = None, *, name: str = "", refine: bool = True
) -> type[SystemMachine]:
    """A `SystemMachine` subclass whose controller and in-memory participants run `hooks`
    (a mutant's tables and policy; a swapped journal recovery is refused with
    `UnsupportedOption` when the run starts), its fence moves judged against the design
    unless `refine` is False; `name` names the class (default: the unmutated protocol)."""
    label = name or "SystemMachine"
    return type(label, (SystemMachine,), {"hooks": hooks, "refine": refine})
