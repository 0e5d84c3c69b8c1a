"""QuiesceConfig: unknown and renamed keys named, coarsen-only overrides, call retries,
YAML/TOML/dict."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from quiesce.protocol import ConfigError, QuiesceConfig, RecoveryLevel


def test_defaults_and_dict_loading() -> None:
    config = QuiesceConfig.load({"save_period": 4, "restore_mode": "trainer_checkpoint"})
    assert config.save_period == 4 and config.restore_mode == "trainer_checkpoint"
    assert config.rollout_recovery.target_level is RecoveryLevel.TURN


def test_call_retries_default_and_a_backoff_cap_below_its_base_is_refused() -> None:
    defaults = QuiesceConfig()
    retries = (defaults.call_retries, defaults.call_backoff_s, defaults.call_backoff_max_s)
    assert retries == (3, 0.5, 10.0)
    with pytest.raises(ConfigError) as error:
        QuiesceConfig.load({"call_backoff_s": 2.0, "call_backoff_max_s": 1.0})
    assert error.value.field == "call_backoff_max_s"
    assert "at least call_backoff_s (2.0)" in str(error.value)
    with pytest.raises(ConfigError) as error:
        QuiesceConfig.load({"call_retries": -1})
    assert error.value.field == "call_retries"


def test_unknown_key_is_named_by_its_dotted_path() -> None:
    with pytest.raises(ConfigError) as error:
        QuiesceConfig.load({"rollout_recovery": {"target_levle": "turn"}})
    assert error.value.field == "rollout_recovery.target_levle"
    assert "rollout_recovery.target_levle" in str(error.value)
    assert error.value.replacement is None


def test_renamed_key_names_its_replacement() -> None:
    with pytest.raises(ConfigError) as error:
        QuiesceConfig.load({"participant_checkpointing_enabled": True})
    assert error.value.replacement == "rollout_recovery.target_level"
    assert "rollout_recovery.target_level" in str(error.value)


def test_removed_key_says_it_was_removed() -> None:
    with pytest.raises(ConfigError) as error:
        QuiesceConfig.load({"capability_discovery_enabled": True})
    assert "discovery always runs" in str(error.value)


def test_overrides_may_only_coarsen() -> None:
    ok = QuiesceConfig.load(
        {"rollout_recovery": {"target_level": "sibling", "overrides": {"genrm": "prompt_group"}}}
    )
    assert ok.rollout_recovery.overrides == {"genrm": RecoveryLevel.PROMPT_GROUP}
    with pytest.raises(ConfigError) as error:
        QuiesceConfig.load(
            {"rollout_recovery": {"target_level": "sibling", "overrides": {"genrm": "turn"}}}
        )
    assert error.value.field == "rollout_recovery.overrides"
    assert "'genrm'" in str(error.value) and "only coarsen" in str(error.value)


def test_bad_values_name_the_field() -> None:
    with pytest.raises(ConfigError) as error:
        QuiesceConfig.load({"rollout_recovery": {"target_level": "everything"}})
    assert error.value.field == "rollout_recovery.target_level"
    with pytest.raises(ConfigError) as error:
        QuiesceConfig.load({"save_period": 0})
    assert error.value.field == "save_period"


def test_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "quiesce.yaml"
    path.write_text("prepare_timeout_s: 12\nrollout_recovery:\n  target_level: prompt_group\n")
    config = QuiesceConfig.load(path)
    assert config.prepare_timeout_s == 12.0
    assert config.rollout_recovery.target_level is RecoveryLevel.PROMPT_GROUP


def test_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "quiesce.toml"
    path.write_text('keep_latest_k = 5\n[rollout_recovery]\ntarget_level = "sibling"\n')
    config = QuiesceConfig.load(str(path))
    assert config.keep_latest_k == 5
    assert config.rollout_recovery.target_level is RecoveryLevel.SIBLING


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_errors_name_the_file_and_the_field(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"bad{suffix}"
    path.write_text("mode: turn_recovery\n" if suffix == ".yaml" else 'mode = "turn_recovery"\n')
    with pytest.raises(ConfigError) as error:
        QuiesceConfig.load(path)
    assert error.value.source == str(path) and str(path) in str(error.value)
    assert error.value.field == "mode"
    assert error.value.replacement == "rollout_recovery.target_level"


def test_unparseable_and_unknown_format_files(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("= nope")
    with pytest.raises(ConfigError, match="does not parse"):
        QuiesceConfig.load(broken)
    other = tmp_path / "config.ini"
    other.write_text("[x]")
    with pytest.raises(ConfigError, match="unknown format"):
        QuiesceConfig.load(other)


def test_config_is_frozen_and_hashable() -> None:
    config = QuiesceConfig()
    with pytest.raises(ValidationError):
        config.save_period = 3  # type: ignore[misc]
    assert hash(config) == hash(QuiesceConfig())
