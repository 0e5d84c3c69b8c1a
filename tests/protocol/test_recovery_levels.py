"""M8 recovery levels and §2 discovery: lowering, warnings, overrides, S13, S14, fingerprint."""

import random

import pytest

from quiesce.protocol import (
    DuplicateParticipant,
    OverrideRefines,
    RecoveryLevel,
    RecoveryMode,
    UnknownRecoveryMode,
    UnknownRole,
    UnmanagedMultiProcess,
    validate_discovery,
)
from quiesce.protocol._errors import RemoteProtocolError
from quiesce.protocol._messages import KNOWN_RECOVERY_MODES, Capabilities
from quiesce.protocol.controller.lowlevel import (
    EffectiveLevel,
    EnvironmentTraits,
    LevelWarning,
    UnknownEnvironment,
    lower_levels,
    topology_fingerprint,
)

TURN, SIBLING, GROUP = RecoveryLevel.TURN, RecoveryLevel.SIBLING, RecoveryLevel.PROMPT_GROUP


def caps(name: str, role: str = "agent", **kw: object) -> Capabilities:
    return Capabilities(participant=name, incarnation="i-1", role=role, **kw)  # type: ignore[arg-type]


def test_levels_are_ordered_finest_to_coarsest() -> None:
    assert TURN < SIBLING < GROUP
    assert sorted([GROUP, TURN, SIBLING]) == [TURN, SIBLING, GROUP]
    assert TURN.coarsest(SIBLING) is SIBLING and GROUP.coarsest(TURN) is GROUP
    assert RecoveryLevel.parse("sibling") is SIBLING
    with pytest.raises(ValueError, match="turn, sibling, prompt_group"):
        RecoveryLevel.parse("row")


def test_nothing_to_lower_gives_the_target_and_no_warning() -> None:
    plan = lower_levels("turn", [EnvironmentTraits("chat")])
    assert plan.levels == (EffectiveLevel("chat", TURN, TURN),)
    assert plan.warnings == ()


def test_group_scored_lowers_live_only_with_one_warning() -> None:
    plan = lower_levels(TURN, [EnvironmentTraits("math", group_scored=True, group_size=4)])
    assert plan.level_of("math") == EffectiveLevel("math", GROUP, TURN)
    assert plan.warnings == (LevelWarning("math", "group_scored", (TURN, GROUP), None),)
    assert "live turn -> prompt_group (group_scored)" in plan.warnings[0].message()


def test_restart_only_dependency_cannot_resume_at_turn() -> None:
    plan = lower_levels(TURN, [EnvironmentTraits("tools", restart_only_dependency=True)])
    assert plan.level_of("tools") == EffectiveLevel("tools", SIBLING, SIBLING)
    assert plan.warnings == (
        LevelWarning("tools", "restart_only_dependency", (TURN, SIBLING), (TURN, SIBLING)),
    )


def test_group_scored_with_restart_only_reruns_whole_at_restore_too() -> None:
    env = EnvironmentTraits("judge", group_scored=True, restart_only_dependency=True)
    plan = lower_levels(TURN, [env])
    assert plan.level_of("judge") == EffectiveLevel("judge", GROUP, GROUP)
    assert [w.reason for w in plan.warnings] == ["restart_only_dependency", "group_scored"]
    assert plan.warnings[1] == LevelWarning(
        "judge", "group_scored", (SIBLING, GROUP), (SIBLING, GROUP)
    )


def test_a_lowering_that_changes_nothing_warns_nothing() -> None:
    env = EnvironmentTraits("math", group_scored=True, restart_only_dependency=True)
    assert lower_levels(GROUP, [env]).warnings == ()
    sibling_only = lower_levels(SIBLING, [EnvironmentTraits("t", restart_only_dependency=True)])
    assert sibling_only.warnings == ()


def test_override_may_coarsen_with_one_warning() -> None:
    plan = lower_levels(TURN, [EnvironmentTraits("a"), EnvironmentTraits("b")], {"b": "sibling"})
    assert plan.level_of("a") == EffectiveLevel("a", TURN, TURN)
    assert plan.level_of("b") == EffectiveLevel("b", SIBLING, SIBLING)
    assert plan.warnings == (LevelWarning("b", "override", (TURN, SIBLING), (TURN, SIBLING)),)


def test_override_that_refines_is_an_error_naming_env_and_levels() -> None:
    with pytest.raises(OverrideRefines) as info:
        lower_levels(SIBLING, [EnvironmentTraits("math")], {"math": TURN})
    assert (info.value.environment, info.value.target, info.value.override) == (
        "math",
        SIBLING,
        TURN,
    )
    assert "'math'" in str(info.value) and "'turn'" in str(info.value)
    assert "'sibling'" in str(info.value)


def test_override_of_an_unknown_environment_is_an_error() -> None:
    with pytest.raises(UnknownEnvironment, match="known environments: math"):
        lower_levels(TURN, [EnvironmentTraits("math")], {"maths": GROUP})
    with pytest.raises(UnknownEnvironment):
        lower_levels(TURN, [EnvironmentTraits("math")]).level_of("chat")


# ------------------------------------------------------------------ discovery (§2)


def fleet() -> list[Capabilities]:
    return [
        caps("policy-0", "policy", recovery_mode="stateless"),
        caps("judge", "policy", instance_role="auxiliary", recovery_mode="stateless"),
        caps("agent-0", "agent", recovery_mode="export_restore"),
        caps(
            "scorer", "resources", recovery_mode="export_restore", group_scored=True, group_size=4
        ),
        caps("sandbox", "resources", recovery_mode="restart_only"),
    ]


def test_validate_discovery_builds_the_topology() -> None:
    topology = validate_discovery(fleet())
    assert [p.participant for p in topology.participants] == sorted(p.participant for p in fleet())
    assert [p.participant for p in topology.by_role("policy")] == ["judge", "policy-0"]
    assert "judge" not in {p.participant for p in topology.fenced()}
    assert topology.environments() == (
        EnvironmentTraits("agent-0", group_scored=True, group_size=4, restart_only_dependency=True),
    )
    only_scorer = topology.environments({"agent-0": ["scorer"]})
    assert only_scorer[0].restart_only_dependency is False and only_scorer[0].group_scored


def test_s13_unknown_recovery_mode_refused_naming_the_server() -> None:
    with pytest.raises(UnknownRecoveryMode) as info:
        validate_discovery([*fleet(), caps("odd", "resources", recovery_mode="snapshot_magic")])
    assert info.value.server == "odd" and info.value.value == "snapshot_magic"
    assert "'odd'" in str(info.value)


def test_s14_unmanaged_multi_process_refused_naming_the_server() -> None:
    with pytest.raises(UnmanagedMultiProcess) as info:
        validate_discovery([caps("agent-7", multi_process="unmanaged")])
    assert info.value.server == "agent-7" and info.value.field == "multi_process"
    assert "'agent-7'" in str(info.value) and "coordinator" in str(info.value)


def test_unknown_role_in_a_raw_reply_is_refused_naming_the_server() -> None:
    raw = {"participant": "mystery", "incarnation": "i", "role": "oracle"}
    with pytest.raises(UnknownRole) as info:
        validate_discovery([raw])
    assert info.value.server == "mystery" and info.value.value == "oracle"


def test_raw_replies_are_checked_before_parsing_and_parsed_after() -> None:
    raw = {"participant": "x", "incarnation": "i", "role": "agent", "recovery_mode": "magic"}
    with pytest.raises(UnknownRecoveryMode, match="'x'"):
        validate_discovery([raw])
    bad_field = {"participant": "y", "incarnation": "i", "role": "agent", "group_size": 0}
    with pytest.raises(RemoteProtocolError) as info:
        validate_discovery([bad_field])
    assert info.value.participant == "y" and info.value.field == "group_size"
    assert not info.value.retryable
    good = {"participant": "z", "incarnation": "i", "role": "agent"}
    assert validate_discovery([good]).participants[0].participant == "z"


def test_duplicate_participant_names_are_refused() -> None:
    with pytest.raises(DuplicateParticipant, match="'agent-0'"):
        validate_discovery([caps("agent-0"), caps("agent-0")])


def test_fingerprint_ignores_features_incarnation_and_order() -> None:
    base = fleet()
    shuffled = base[:]
    random.Random(7).shuffle(shuffled)
    restarted = [p.model_copy(update={"incarnation": "i-2", "features": ("x",)}) for p in base]
    assert topology_fingerprint(base) == topology_fingerprint(shuffled)
    assert topology_fingerprint(base) == topology_fingerprint(restarted)
    assert validate_discovery(shuffled).fingerprint == topology_fingerprint(base)
    changed = [*base[:-1], base[-1].model_copy(update={"recovery_mode": "export_restore"})]
    assert topology_fingerprint(changed) != topology_fingerprint(base)
    assert len(topology_fingerprint(base)) == 64


def test_the_wire_vocabulary_knows_exactly_the_recovery_modes_of_the_enum() -> None:
    # The wire keeps recovery modes as open strings (S13 refuses an unknown one at setup,
    # naming the server), so its list of known modes is a second spelling of the enum.
    assert set(KNOWN_RECOVERY_MODES) == {mode.value for mode in RecoveryMode}
