"""The backend registry opens the embedded default: the store owns the server it started."""

from __future__ import annotations

from pathlib import Path

import pytest

from statestore.backends import open_state_store
from statestore.partitions import partitions_from_split_points
from statestore.schema import Schema

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}]})


def test_without_a_dsn_the_embedded_server_starts_and_stops_with_the_store(server_dir: Path) -> None:
    data = server_dir / "pg"
    store = open_state_store("postgres", embedded_dir=data)
    store.create_table("events", SCHEMA, partitions_from_split_points(SCHEMA, ["m"]))
    assert (data / "postmaster.pid").exists()
    store.close()
    store.close()  # a second close does nothing
    assert not (data / "postmaster.pid").exists()  # the server it started is stopped

    again = open_state_store("postgres", embedded_dir=data)
    try:
        assert [t.name for t in again.list_tables()] == ["events"]
    finally:
        again.close()
