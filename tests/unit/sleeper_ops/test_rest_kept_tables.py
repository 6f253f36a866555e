"""``GET /tables/{t}/records`` looks a table's name up once per process, not once per request,
and still answers for the table that has the name when the request is made: after a rename,
a delete, or a new table taking the name (sleeper_ops.web.routes.context.RestContext.kept_table)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.web.rest import create_app
from statestore.memory import InMemoryStateStore

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}], "valueFields": [{"name": "v", "type": "LongType"}]}
LONG_KEYS = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "LongType"}]}


class CountingStore(InMemoryStateStore):
    """The in-memory store, counting catalog look-ups by name."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def get_table(self, name: str) -> Any:
        self.lookups += 1
        return super().get_table(name)


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[Sleeper]:
    s = Sleeper(state_store=CountingStore(), objects=ObjectStore(str(tmp_path / "data")))
    s.create_table("t", SCHEMA).ingest(pa.table({"key": ["a", "b"], "v": pa.array([1, 2], pa.int64())}))
    yield s
    s.close()


@pytest.fixture
def client(sleeper: Sleeper) -> Iterator[TestClient]:
    with TestClient(create_app(lambda: sleeper)) as c:
        yield c


def get(client: TestClient, table: str, key: Any) -> Any:
    return client.get(f"/tables/{table}/records", params={"key": json.dumps(key)})


def test_repeated_key_lookups_look_the_table_name_up_once(client: TestClient, sleeper: Sleeper) -> None:
    store: CountingStore = sleeper.state_store  # type: ignore[assignment]
    before = store.lookups
    for _ in range(5):
        r = get(client, "t", "a")
        assert r.status_code == 200 and r.json() == {"records": [{"key": "a", "v": 1}], "count": 1, "truncated": False}
    assert store.lookups - before == 1


def test_a_renamed_table_is_not_found_by_its_old_name(client: TestClient, sleeper: Sleeper) -> None:
    assert get(client, "t", "a").status_code == 200
    sleeper.rename_table("t", "u")
    r = get(client, "t", "a")
    assert r.status_code == 404, r.text
    assert get(client, "u", "a").json()["records"] == [{"key": "a", "v": 1}]


def test_a_new_table_of_a_renamed_ones_name_is_the_one_read(client: TestClient, sleeper: Sleeper) -> None:
    assert get(client, "t", "a").json()["count"] == 1
    sleeper.rename_table("t", "old")
    sleeper.create_table("t", SCHEMA).ingest(pa.table({"key": ["a"], "v": pa.array([7], pa.int64())}))
    assert get(client, "t", "a").json() == {"records": [{"key": "a", "v": 7}], "count": 1, "truncated": False}


def test_a_deleted_table_is_not_found_and_its_successor_of_another_schema_is_read(
        client: TestClient, sleeper: Sleeper) -> None:
    assert get(client, "t", "a").status_code == 200
    sleeper.delete_table("t")
    assert get(client, "t", "a").status_code == 404
    assert get(client, "t", "b").status_code == 404
    sleeper.create_table("t", LONG_KEYS).ingest(pa.table({"key": pa.array([5], pa.int64()),
                                                          "v": pa.array([50], pa.int64())}))
    assert get(client, "t", 5).json() == {"records": [{"key": 5, "v": 50}], "count": 1, "truncated": False}
