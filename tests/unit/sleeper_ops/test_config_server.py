"""``[state_store] idle_minutes``: how long the embedded PostgreSQL outlives a command."""

from __future__ import annotations

from pathlib import Path

import pytest

from sleeper_ops.config import DEFAULT_IDLE_MINUTES, IDLE_MINUTES_ENV, SleeperConfig
from sleeper_ops.errors import ConfigError


@pytest.fixture(autouse=True)
def no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(IDLE_MINUTES_ENV, raising=False)


def test_the_default_keeps_the_server_for_thirty_idle_minutes(tmp_path: Path) -> None:
    config = SleeperConfig.from_dict(tmp_path, {})
    assert config.idle_minutes == DEFAULT_IDLE_MINUTES == 30
    assert config.state_store_options()["idle_minutes"] == 30


def test_the_setting_round_trips_through_the_file(tmp_path: Path) -> None:
    config = SleeperConfig.from_dict(tmp_path, {"state_store": {"idle_minutes": 2.5}})
    assert config.idle_minutes == 2.5
    assert SleeperConfig.from_dict(tmp_path, config.to_dict()) == config


def test_the_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(IDLE_MINUTES_ENV, "0")
    assert SleeperConfig.from_dict(tmp_path, {"state_store": {"idle_minutes": 45}}).idle_minutes == 0


@pytest.mark.parametrize("value", [-1, "soon", [1]])
def test_a_bad_value_is_refused_naming_the_setting(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match="state_store.idle_minutes"):
        SleeperConfig.from_dict(tmp_path, {"state_store": {"idle_minutes": value}})


def test_a_bad_environment_value_is_refused_naming_the_variable(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(IDLE_MINUTES_ENV, "-5")
    with pytest.raises(ConfigError, match=IDLE_MINUTES_ENV):
        SleeperConfig.from_dict(tmp_path, {})
