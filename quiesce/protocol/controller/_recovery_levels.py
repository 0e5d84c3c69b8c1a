"""Recovery levels (M8) and discovery validation (§2): what each environment can recover.

What lives here: the target level `turn | sibling | prompt_group` (finest to coarsest),
the effective pair `(live_level, restore_level)` of every environment lowered from what
its participants report at discovery, the warnings those lowerings produce, the setup
refusals of §2 (S13, S14) and the topology fingerprint that goes into every snapshot.
What it does not know: how discovery is called, or what the coordinator does with a level.
Everything is a pure function of its arguments.

Public API (stable; the coordinator calls these):

- `RecoveryLevel`: Enum `TURN < SIBLING < PROMPT_GROUP` (ordered finest to coarsest;
  `a.coarsest(b)` is the coarser of two, `RecoveryLevel.parse("turn")`).
- `validate_discovery(replies) -> Topology`: refuses at setup (typed errors, each naming
  the server): `UnknownRole`, `UnknownRecoveryMode` (S13), `UnmanagedMultiProcess` (S14,
  also any unknown multi-process mode), `DuplicateParticipant`. `replies` are
  `Capabilities` or raw mappings (a raw mapping is checked for role / recovery mode /
  multi-process mode before it is parsed, so the error still names the server).
- `Topology`: frozen; `.participants` (sorted by name), `.fingerprint` (str),
  `.by_role(role)`, `.fenced()` (every participant but auxiliary policy servers),
  `.environments(depends_on=None) -> tuple[EnvironmentTraits, ...]`.
- `topology_fingerprint(capabilities) -> str`: sha256 hex over every participant but its
  features and incarnation; independent of order.
- `EnvironmentTraits(name, group_scored, group_size, restart_only_dependency)`: one
  environment (= one primary agent server and the resources its rollouts depend on).
- `lower_levels(target, environments, overrides=None) -> LevelPlan`: the effective pair of
  every environment plus one `LevelWarning` per lowering. Raises `OverrideRefines` when an
  override is finer than the target, `UnknownEnvironment` when it names no environment.
- `LevelPlan`: `.levels` (tuple of `EffectiveLevel`, in environment order),
  `.warnings` (tuple of `LevelWarning`), `.level_of(env) -> EffectiveLevel`.
- `EffectiveLevel(environment, live_level, restore_level)`.
- `LevelWarning(environment, reason, live, restore)`: `reason` is `"override"`,
  `"group_scored"` or `"restart_only_dependency"`; `live` / `restore` are
  `(from_level, to_level)` or `None` when that half did not change.

Lowering rules (PROTOCOL.md M8), applied in this order, each emitting at most one warning:
1. an override (coarser than or equal to the target) replaces the target for its
   environment; a refining override is an error, never silently ignored;
2. a rollout depending on a `restart_only` resource cannot resume at `turn`: both halves
   go to at least `sibling`;
3. a group-scored environment (its scorer waits for all G siblings) has
   `live_level = prompt_group` (S11: a sibling retried alone waits for a group that never
   forms). Its `restore_level` may stay `turn`, because all siblings resume together; below
   `turn` some siblings would restart alone, so it goes to `prompt_group` as well.

>>> plan = lower_levels(RecoveryLevel.TURN, [EnvironmentTraits("math", group_scored=True)])
>>> plan.level_of("math").live_level, plan.level_of("math").restore_level
(<RecoveryLevel.PROMPT_GROUP: 'prompt_group'>, <RecoveryLevel.TURN: 'turn'>)
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from quiesce.protocol._errors import ProtocolError
from quiesce.protocol._levels import OverrideRefines, RecoveryLevel
from quiesce.protocol._messages import (
    KNOWN_MULTI_PROCESS_MODES,
    KNOWN_RECOVERY_MODES,
    Capabilities,
    InstanceRole,
    Role,
    parse_reply,
)

__all__ = [
    "DiscoveryRefused",
    "DuplicateParticipant",
    "EffectiveLevel",
    "EnvironmentTraits",
    "LevelPlan",
    "LevelWarning",
    "LoweringReason",
    "Topology",
    "UnknownEnvironment",
    "UnknownRecoveryMode",
    "UnknownRole",
    "UnmanagedMultiProcess",
    "lower_levels",
    "topology_fingerprint",
    "validate_discovery",
]

LoweringReason = Literal["override", "restart_only_dependency", "group_scored"]


# ----------------------------------------------------------------------------- errors


class DiscoveryRefused(ProtocolError):
    """Setup refused a participant's discovery reply (§2); names the server and the field."""

    def __init__(self, server: str, field: str, value: object, allowed: Iterable[str]) -> None:
        self.server = server
        self.field = field
        self.value = value
        self.allowed = tuple(allowed)
        super().__init__(
            f"participant {server!r} reports {field}={value!r}, which quiesce refuses at setup; "
            f"supported: {', '.join(self.allowed)}. Fix the server's configuration or upgrade "
            "quiesce before checkpointing."
        )


class UnknownRole(DiscoveryRefused):
    """A participant reports a role the controller does not know."""

    def __init__(self, server: str, value: object) -> None:
        super().__init__(server, "role", value, Role)


class UnknownRecoveryMode(DiscoveryRefused):
    """S13: a recovery mode the controller does not know would mean silent mis-recovery."""

    def __init__(self, server: str, value: object) -> None:
        super().__init__(server, "recovery_mode", value, KNOWN_RECOVERY_MODES)


class UnmanagedMultiProcess(DiscoveryRefused):
    """S14: a multi-worker server without a coordinator; a checkpoint would see one worker."""

    def __init__(self, server: str, value: object) -> None:
        super().__init__(server, "multi_process", value, KNOWN_MULTI_PROCESS_MODES)


class DuplicateParticipant(ProtocolError):
    """Two discovery replies carry the same participant name."""

    def __init__(self, server: str) -> None:
        self.server = server
        super().__init__(f"two participants are named {server!r}; every server needs a unique name")


class UnknownEnvironment(ProtocolError):
    """An override names an environment that discovery did not report."""

    def __init__(self, environment: str, known: Iterable[str]) -> None:
        self.environment = environment
        self.known = tuple(known)
        super().__init__(
            f"override names environment {environment!r}, which discovery did not report; "
            f"known environments: {', '.join(self.known) or '(none)'}"
        )


# ----------------------------------------------------------------------------- discovery


def topology_fingerprint(capabilities: Iterable[Capabilities]) -> str:
    """A stable hash of the topology: every participant but its features and incarnation.

    Independent of the order of `capabilities`; goes into every snapshot so a restore never
    picks a snapshot taken by a different fleet.
    """
    parts = sorted("\x1f".join(c.fingerprint()) for c in capabilities)
    return hashlib.sha256("\x1e".join(parts).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class EnvironmentTraits:
    """What discovery says about one environment, as far as recovery levels care."""

    name: str
    group_scored: bool = False
    group_size: int | None = None
    restart_only_dependency: bool = False


@dataclass(frozen=True, slots=True)
class Topology:
    """The validated discovery result: participants sorted by name, and their fingerprint."""

    participants: tuple[Capabilities, ...]
    fingerprint: str

    def by_role(self, role: Role) -> tuple[Capabilities, ...]:
        """Participants of one role, by name."""
        return tuple(p for p in self.participants if p.role == role)

    def fenced(self) -> tuple[Capabilities, ...]:
        """Participants that take part in checkpoints (auxiliary policy servers do not)."""
        return tuple(
            p
            for p in self.participants
            if not (p.role is Role.POLICY and p.instance_role is InstanceRole.AUXILIARY)
        )

    def environments(
        self, depends_on: Mapping[str, Iterable[str]] | None = None
    ) -> tuple[EnvironmentTraits, ...]:
        """One `EnvironmentTraits` per primary agent server.

        `depends_on` maps an agent's name to the resources servers its rollouts use; without
        an entry the agent depends on every resources server (the safe assumption). An
        environment is group-scored if its agent or any resource it depends on says so.
        """
        resources = {p.participant: p for p in self.by_role(Role.RESOURCES)}
        traits = []
        for agent in self.by_role(Role.AGENT):
            if agent.instance_role is InstanceRole.AUXILIARY:
                continue
            names = resources if depends_on is None else depends_on.get(agent.participant)
            used = [resources[n] for n in (resources if names is None else names) if n in resources]
            scored = [p for p in (agent, *used) if p.group_scored]
            traits.append(
                EnvironmentTraits(
                    name=agent.participant,
                    group_scored=bool(scored),
                    group_size=next((p.group_size for p in scored if p.group_size), None),
                    restart_only_dependency=any(p.recovery_mode == "restart_only" for p in used),
                )
            )
        return tuple(traits)


def validate_discovery(
    replies: Iterable[Capabilities | Mapping[str, Any]],
    *,
    recovery_modes: Collection[str] = KNOWN_RECOVERY_MODES,
    multi_process_modes: Collection[str] = KNOWN_MULTI_PROCESS_MODES,
) -> Topology:
    """Check every discovery reply (§2) and return the `Topology`.

    Refuses, naming the server: an unknown role (`UnknownRole`), a recovery mode not in
    `recovery_modes` (`UnknownRecoveryMode`, S13), `unmanaged` or any multi-process mode not
    in `multi_process_modes` (`UnmanagedMultiProcess`, S14), two replies with one name
    (`DuplicateParticipant`). Raw mappings are checked before parsing; any other malformed
    field is a `RemoteProtocolError` naming the participant (not retryable: it is a setup
    error). The mode sets default to the protocol's (`_messages.KNOWN_*`).
    """
    parsed: dict[str, Capabilities] = {}
    for reply in replies:
        if isinstance(reply, Mapping):
            server = str(reply.get("participant", "<unnamed>"))
            if reply.get("role") not in tuple(Role):
                raise UnknownRole(server, reply.get("role"))
            reply = parse_reply(Capabilities, server, dict(reply), retryable=False)
        if reply.recovery_mode not in recovery_modes:
            raise UnknownRecoveryMode(reply.participant, reply.recovery_mode)
        if reply.multi_process not in multi_process_modes:
            raise UnmanagedMultiProcess(reply.participant, reply.multi_process)
        if reply.participant in parsed:
            raise DuplicateParticipant(reply.participant)
        parsed[reply.participant] = reply
    participants = tuple(parsed[name] for name in sorted(parsed))
    return Topology(participants, topology_fingerprint(participants))


# ----------------------------------------------------------------------------- lowering


@dataclass(frozen=True, slots=True)
class EffectiveLevel:
    """The levels one environment really runs at: live (deadline, crash) and at restore."""

    environment: str
    live_level: RecoveryLevel
    restore_level: RecoveryLevel


@dataclass(frozen=True, slots=True)
class LevelWarning:
    """One lowering of one environment, with its reason; `live`/`restore` are
    `(from, to)` for the half it changed, `None` for a half it left alone."""

    environment: str
    reason: LoweringReason
    live: tuple[RecoveryLevel, RecoveryLevel] | None
    restore: tuple[RecoveryLevel, RecoveryLevel] | None

    def message(self) -> str:
        """A one-line human description, for logs."""
        changes = [
            f"{half} {old.value} -> {new.value}"
            for half, pair in (("live", self.live), ("restore", self.restore))
            if pair is not None
            for old, new in [pair]
        ]
        return f"environment {self.environment!r}: {', '.join(changes)} ({self.reason})"


@dataclass(frozen=True, slots=True)
class LevelPlan:
    """The result of `lower_levels`: every environment's pair, and the warnings."""

    levels: tuple[EffectiveLevel, ...]
    warnings: tuple[LevelWarning, ...]

    def level_of(self, environment: str) -> EffectiveLevel:
        """The pair of `environment`; `UnknownEnvironment` if it has none."""
        for level in self.levels:
            if level.environment == environment:
                return level
        raise UnknownEnvironment(environment, [lv.environment for lv in self.levels])


def lower_levels(
    target: RecoveryLevel | str,
    environments: Iterable[EnvironmentTraits],
    overrides: Mapping[str, RecoveryLevel | str] | None = None,
) -> LevelPlan:
    """Lower `target` per environment to the finest pair each one supports (module rules).

    Raises `OverrideRefines` if an override is finer than `target` and
    `UnknownEnvironment` if it names no environment; nothing is returned then.
    """
    target = RecoveryLevel.parse(target)
    envs = tuple(environments)
    names = [e.name for e in envs]
    wanted = {name: RecoveryLevel.parse(level) for name, level in (overrides or {}).items()}
    for name, level in wanted.items():
        if name not in names:
            raise UnknownEnvironment(name, names)
        if level < target:
            raise OverrideRefines(name, target, level)
    levels: list[EffectiveLevel] = []
    warnings: list[LevelWarning] = []
    for env in envs:
        pair = (target, target)
        if env.name in wanted:
            pair = _lower(env.name, "override", pair, (wanted[env.name],) * 2, warnings)
        if env.restart_only_dependency:
            sibling = (RecoveryLevel.SIBLING, RecoveryLevel.SIBLING)
            pair = _lower(env.name, "restart_only_dependency", pair, sibling, warnings)
        if env.group_scored:
            # All siblings resume together only at turn; any coarser restore restarts some
            # siblings alone, which a group scorer never completes (S11).
            keep_turn = pair[1] is RecoveryLevel.TURN
            restore = RecoveryLevel.TURN if keep_turn else RecoveryLevel.PROMPT_GROUP
            pair = _lower(
                env.name, "group_scored", pair, (RecoveryLevel.PROMPT_GROUP, restore), warnings
            )
        levels.append(EffectiveLevel(env.name, *pair))
    return LevelPlan(tuple(levels), tuple(warnings))


def _lower(
    environment: str,
    reason: LoweringReason,
    current: tuple[RecoveryLevel, RecoveryLevel],
    floor: tuple[RecoveryLevel, RecoveryLevel],
    warnings: list[LevelWarning],
) -> tuple[RecoveryLevel, RecoveryLevel]:
    """Raise `(live, restore)` to at least `floor`; append one warning if anything moved."""
    live, restore = current
    # Never refine: a rule only moves a half towards prompt_group.
    new_live, new_restore = live.coarsest(floor[0]), restore.coarsest(floor[1])
    if (new_live, new_restore) != current:
        warnings.append(
            LevelWarning(
                environment,
                reason,
                (live, new_live) if new_live != live else None,
                (restore, new_restore) if new_restore != restore else None,
            )
        )
    return new_live, new_restore
