"""``[state_store] group_commit`` of a DynamoDB home: on by default, passed to the store
when off, kept by a round trip through the file, a non-boolean refused naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sleeper_ops.config import SleeperConfig
from sleeper_ops.errors import ConfigError

SECTION = {"backend": "dynamodb", "object_store": "s3://b/state"}


def test_group_commit_is_on_unless_turned_off_and_reaches_the_store_when_off(tmp_path: Path) -> None:
    on = SleeperConfig.from_dict(tmp_path, {"state_store": SECTION})
    assert on.state_store_options()["group_commit"] is True
    assert SleeperConfig.from_dict(tmp_path, on.to_dict()) == on
    off = SleeperConfig.from_dict(tmp_path, {"state_store": {**SECTION, "group_commit": False}})
    assert off.state_store_options()["group_commit"] is False
    assert SleeperConfig.from_dict(tmp_path, off.to_dict()) == off


@pytest.mark.parametrize("value", ["yes", 1, [True]])
def test_a_non_boolean_group_commit_is_refused_naming_the_setting(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match="state_store.group_commit"):
        SleeperConfig.from_dict(tmp_path, {"state_store": {**SECTION, "group_commit": value}})
