"""`QuiesceConfig`: every setting of the protocol, validated at the boundary.

A pydantic model (`frozen=True, extra="forbid"`): an unknown key is refused by
`ConfigError` naming its full dotted path, and a key that was renamed or removed names its
replacement (`participant_checkpointing_enabled` -> `rollout_recovery.target_level`), so an
old config fails at startup with the fix in the message instead of being silently ignored.

Load from a mapping, a YAML file or a TOML file; errors name the file and the field:

>>> QuiesceConfig.load({"save_period": 2}).save_period
2
>>> config = QuiesceConfig.load({"rollout_recovery": {"target_level": "sibling"}})
>>> config.rollout_recovery.target_level
<RecoveryLevel.SIBLING: 'sibling'>
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from quiesce.fsm import QuiesceError
from quiesce.protocol._levels import OverrideRefines, RecoveryLevel

__all__ = ["RENAMED_KEYS", "ConfigError", "QuiesceConfig", "RolloutRecoveryConfig"]


RENAMED_KEYS: Mapping[str, str | None] = {
    # The two switches of the old design are one decision now (seed review, target level).
    "participant_checkpointing_enabled": "rollout_recovery.target_level",
    "mode": "rollout_recovery.target_level",
    "turn_recovery": "rollout_recovery.target_level",
    "granularity_overrides": "rollout_recovery.overrides",
    # Discovery always runs: it is how levels are lowered, so it is not a setting.
    "capability_discovery_enabled": None,
}
"""Keys that no longer exist, matched by their last path component: the replacement's
dotted path, or None when the key was removed without one."""

_REMOVED_HINTS = {"capability_discovery_enabled": "discovery always runs"}


class ConfigError(QuiesceError, ValueError):
    """A configuration is refused; `field` is the dotted path, `source` the file (if any)."""

    def __init__(
        self,
        field: str,
        detail: str,
        *,
        source: str | None = None,
        replacement: str | None = None,
    ) -> None:
        self.field = field
        self.detail = detail
        self.source = source
        self.replacement = replacement
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{field}: {detail}")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RolloutRecoveryConfig(_Strict):
    """`rollout_recovery`: the finest level to recover at, and per-environment overrides.

    Overrides may only coarsen: an override finer than `target_level` is refused here.
    """

    target_level: RecoveryLevel = RecoveryLevel.TURN
    overrides: dict[str, RecoveryLevel] = Field(default_factory=dict)

    @field_validator("target_level", mode="before")
    @classmethod
    def _parse_level(cls, value: Any) -> RecoveryLevel:
        return RecoveryLevel.parse(value)

    @field_validator("overrides", mode="before")
    @classmethod
    def _parse_overrides(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {name: RecoveryLevel.parse(level) for name, level in value.items()}
        return value

    @field_validator("overrides")
    @classmethod
    def _coarsen_only(
        cls, value: dict[str, RecoveryLevel], info: ValidationInfo
    ) -> dict[str, RecoveryLevel]:
        target = info.data.get("target_level")
        for name, level in value.items():
            if target is not None and level < target:
                # The same rule `lower_levels` enforces after discovery; refused here already
                # so a bad config fails at load, naming the environment.
                raise ValueError(str(OverrideRefines(name, target, level)))
        return value

    def __hash__(self) -> int:
        return hash((self.target_level, tuple(sorted(self.overrides.items()))))


class QuiesceConfig(_Strict):
    """Every setting of the protocol (durations in seconds, `_s`)."""

    rollout_timeout_s: float = Field(default=600.0, gt=0)
    """Deadline of one prompt group's rollouts (M7); suspended time is not charged."""
    prepare_timeout_s: float = Field(default=300.0, gt=0)
    """Prepare calls share `admission_closed_at + prepare_timeout_s` (§3)."""
    control_timeout_s: float = Field(default=60.0, gt=0)
    """Every other control call gets `now + control_timeout_s` (§3)."""
    prepare_retry_interval_s: float = Field(default=1.0, gt=0)
    """How long to wait before asking a `not_ready` participant again."""
    call_retries: int = Field(default=3, ge=0)
    """How many more times a prepare or commit call that failed transiently (timeout, lost,
    I/O error, 5xx) is sent again, same op id, before the attempt fails (§4)."""
    call_try_timeout_s: float | None = Field(default=None, gt=0)
    """How long one try of a call that may be retried waits for its reply, within the call's
    deadline (§4). None: up to `control_timeout_s`, so a commit or release try that times
    out leaves its retries no time; a few round trips lets a lost reply be retried in time."""
    call_backoff_s: float = Field(default=0.5, gt=0)
    """The first retry's backoff; it doubles per retry, with full jitter (§4)."""
    call_backoff_max_s: float = Field(default=10.0, gt=0)
    """No retry waits longer than this (and none is sent past the call's deadline)."""
    snapshot_attempt_interval_s: float = Field(default=120.0, gt=0)
    """The periodic trigger, and the retry timer of a pending abort or release."""
    save_period: int = Field(default=1, ge=1)
    """A trainer boundary at a step divisible by this triggers a snapshot."""
    max_consecutive_failures: int = Field(default=3, ge=0)
    """More than this many retryable failures in a row stop the run."""
    max_consecutive_skips: int = Field(default=10, ge=1)
    """This many skips in a row (and every one after) log a warning."""
    keep_latest_k: int = Field(default=2, ge=1)
    """Published snapshots kept in the store."""
    restore_mode: Literal["latest", "trainer_checkpoint"] = "latest"
    """Which snapshot a restart restores (M9)."""
    rollout_recovery: RolloutRecoveryConfig = Field(default_factory=RolloutRecoveryConfig)

    @field_validator("call_backoff_max_s")
    @classmethod
    def _cap_above_base(cls, value: float, info: ValidationInfo) -> float:
        base = info.data.get("call_backoff_s")
        if base is not None and value < base:
            raise ValueError(f"must be at least call_backoff_s ({base}); raise it or lower that")
        return value

    @classmethod
    def load(cls, source: Mapping[str, Any] | str | Path) -> QuiesceConfig:
        """Build from a mapping, or from a `.yaml`/`.yml`/`.toml` file path.

        Raises `ConfigError` naming the file (if any), the dotted field and, for a renamed
        key, its replacement.
        """
        if isinstance(source, Mapping):
            return cls._from_mapping(source, None)
        path = Path(source)
        try:
            text = path.read_text()
        except OSError as error:
            raise ConfigError("<file>", f"cannot read: {error}", source=str(path)) from None
        # Imported here: a config file is the only YAML quiesce reads, and yaml is slow to
        # import for every command that never reads one.
        import yaml

        try:
            if path.suffix == ".toml":
                data: Any = tomllib.loads(text)
            elif path.suffix in (".yaml", ".yml"):
                data = yaml.safe_load(text) or {}
            else:
                raise ConfigError(
                    "<file>", "unknown format; use .toml, .yaml or .yml", source=str(path)
                )
        except (tomllib.TOMLDecodeError, yaml.YAMLError) as error:
            raise ConfigError("<file>", f"does not parse: {error}", source=str(path)) from None
        if not isinstance(data, Mapping):
            raise ConfigError("<file>", "the top level must be a mapping", source=str(path))
        return cls._from_mapping(data, str(path))

    @classmethod
    def _from_mapping(cls, data: Mapping[str, Any], source: str | None) -> QuiesceConfig:
        try:
            return cls.model_validate(dict(data))
        except ValidationError as error:
            raise _first_error(error, source) from None


def _first_error(error: ValidationError, source: str | None) -> ConfigError:
    first = error.errors()[0]
    path = ".".join(str(part) for part in first["loc"]) or "<root>"
    if first["type"] == "extra_forbidden":
        key = str(first["loc"][-1])
        if key in RENAMED_KEYS:
            replacement = RENAMED_KEYS[key]
            if replacement is None:
                hint = _REMOVED_HINTS.get(key, "remove it")
                detail = f"unknown key: it was removed ({hint}); delete it"
            else:
                detail = f"unknown key: it was renamed; use {replacement!r} instead"
            return ConfigError(path, detail, source=source, replacement=replacement)
        return ConfigError(path, "unknown key; check its spelling", source=source)
    message = first["msg"].removeprefix("Value error, ")
    return ConfigError(path, f"{message} (got {first.get('input')!r})", source=source)
