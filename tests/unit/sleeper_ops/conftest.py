"""Fixtures for the data plane's unit tests: an in-memory state store over a local object store."""

from __future__ import annotations

import pytest

from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from statestore.memory import InMemoryStateStore


@pytest.fixture
def sleeper(tmp_path):
    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    yield s
    s.close()


@pytest.fixture
def input_dir(tmp_path):
    d = tmp_path / "input"
    d.mkdir()
    return d
