"""M7 deadline registry: the holder set, uncharged suspended time, expiry only when running."""

import pytest

from quiesce.fsm import TransitionNotAllowed
from quiesce.protocol.controller.lowlevel import (
    ArmTimer,
    CancelTimer,
    DeadlineExpired,
    ResumeDeadlines,
    SuspendDeadlines,
)
from quiesce.protocol.machines import DEADLINE_REGISTRY as REG
from quiesce.protocol.machines import DeadlineArg, RegistryInput, RegistryState, deadline_timer


def step(value, event, key, now, budget_s=0.0):
    value, effects = REG.step(value, event, DeadlineArg(key, now, budget_s))
    return value, [e for group in effects for e in group]


def started(group="g", now=10.0, budget_s=100.0):
    return step(REG.start(), RegistryInput.START, group, now, budget_s)


def test_start_arms_the_group_timer_at_now_plus_budget() -> None:
    value, effects = started()
    assert effects == [ArmTimer(deadline_timer("g"), 110.0)]
    assert value.state is RegistryState.RUNNING


def test_suspend_charges_elapsed_time_and_cancels_timers() -> None:
    value, _ = started()
    value, effects = step(value, RegistryInput.SUSPEND, "checkpoint", 30.0)
    assert value.state is RegistryState.SUSPENDED
    assert value.data.remaining("g") == 80.0  # 20 s ran before the suspension
    assert effects == [SuspendDeadlines("checkpoint"), CancelTimer(deadline_timer("g"))]


def test_time_while_suspended_is_not_charged() -> None:
    value, _ = started()
    value, _ = step(value, RegistryInput.SUSPEND, "checkpoint", 30.0)
    value, effects = step(value, RegistryInput.RESUME, "checkpoint", 500.0)
    assert value.state is RegistryState.RUNNING
    # 80 s were left at the suspension; the 470 s suspended are free.
    assert effects == [ResumeDeadlines("checkpoint"), ArmTimer(deadline_timer("g"), 580.0)]


def test_s1_timer_due_while_suspended_never_expires() -> None:
    value, _ = started()
    value, _ = step(value, RegistryInput.SUSPEND, "checkpoint", 30.0)
    after, effects = step(value, RegistryInput.TIMER_DUE, "g", 1000.0)
    assert after == value and effects == []


def test_expiry_only_when_running() -> None:
    value, _ = started()
    value, effects = step(value, RegistryInput.TIMER_DUE, "g", 110.0)
    assert effects == [DeadlineExpired("g")]
    assert value.data.remaining("g") is None
    # A second (stale) timer for a forgotten group expires nothing.
    again, effects = step(value, RegistryInput.TIMER_DUE, "g", 111.0)
    assert again == value and effects == []


def test_s2_first_resume_of_two_holders_keeps_clocks_stopped() -> None:
    value, _ = started()
    value, _ = step(value, RegistryInput.SUSPEND, "train_switch", 20.0)
    value, effects = step(value, RegistryInput.SUSPEND, "checkpoint", 25.0)
    assert effects == []  # already suspended: only the holder set grows
    value, effects = step(value, RegistryInput.RESUME, "train_switch", 40.0)
    assert value.state is RegistryState.SUSPENDED and value.data.holders == {"checkpoint"}
    assert effects == []
    value, effects = step(value, RegistryInput.RESUME, "checkpoint", 60.0)
    assert value.state is RegistryState.RUNNING
    assert effects[-1] == ArmTimer(deadline_timer("g"), 60.0 + 90.0)


def test_repeated_suspend_by_the_same_holder_is_a_no_op() -> None:
    value, _ = step(REG.start(), RegistryInput.SUSPEND, "checkpoint", 1.0)
    again, effects = step(value, RegistryInput.SUSPEND, "checkpoint", 2.0)
    assert again == value and effects == []


def test_stray_resume_changes_nothing() -> None:
    value, _ = started()
    after, effects = step(value, RegistryInput.RESUME, "checkpoint", 50.0)
    assert after == value and effects == []


def test_resume_by_a_non_holder_keeps_the_others_hold() -> None:
    value, _ = step(REG.start(), RegistryInput.SUSPEND, "checkpoint", 1.0)
    after, effects = step(value, RegistryInput.RESUME, "train_switch", 2.0)
    assert after.state is RegistryState.SUSPENDED and after.data.holders == {"checkpoint"}
    assert effects == []


def test_start_while_suspended_arms_nothing_until_resume() -> None:
    value, _ = step(REG.start(), RegistryInput.SUSPEND, "checkpoint", 0.0)
    value, effects = step(value, RegistryInput.START, "g", 5.0, 100.0)
    assert effects == []
    value, effects = step(value, RegistryInput.RESUME, "checkpoint", 50.0)
    assert effects[-1] == ArmTimer(deadline_timer("g"), 150.0)


def test_stop_forgets_the_group_and_cancels_its_timer() -> None:
    value, _ = started()
    value, effects = step(value, RegistryInput.STOP, "g", 20.0)
    assert value.data.budgets == () and effects == [CancelTimer(deadline_timer("g"))]


def test_invariant_running_iff_no_holder_holds_on_every_value() -> None:
    value, _ = started()
    for event, key in [
        (RegistryInput.SUSPEND, "checkpoint"),
        (RegistryInput.SUSPEND, "train_switch"),
        (RegistryInput.RESUME, "checkpoint"),
        (RegistryInput.RESUME, "train_switch"),
    ]:
        value, _ = step(value, event, key, 1.0)
        assert REG.check_invariants(value) == []


def test_a_mutant_without_the_suspended_ignore_refuses_instead_of_expiring() -> None:
    # The rows are data: dropping the guard of the last-holder row breaks S2.
    index = next(i for i, r in enumerate(REG.rows) if r.guard == "last_holder")
    mutant = REG.without_guard(index)
    value, _ = started()
    value, _ = step(value, RegistryInput.SUSPEND, "train_switch", 20.0)
    value, _ = step(value, RegistryInput.SUSPEND, "checkpoint", 20.0)
    value, _ = mutant.step(value, RegistryInput.RESUME, DeadlineArg("train_switch", 30.0))
    assert value.state is RegistryState.RUNNING  # the bug S2 describes
    with pytest.raises(TransitionNotAllowed):
        REG.derive("no_rows", rows=[]).step(REG.start(), RegistryInput.START, DeadlineArg("g", 0))
