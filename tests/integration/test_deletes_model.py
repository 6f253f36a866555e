"""Model-based test of deletes and as-of reads (issue 22): Hypothesis interleaves ingest, buffered
writes, deletes (by range, with or without a predicate), flushes, compactions (purging
at once), splits and garbage collection on a table, and after every step a whole-table
query must return exactly what a plain-Python model holds: a list of records, each a
dict, from which a delete removes the matching ones. The model shares no code with
Sleeper. :class:`AsOfMachine` also queries as of earlier transactions against every
version the model kept. Runs on the in-memory store, PostgreSQL and DynamoDB (moto);
each example is a fresh table."""

from __future__ import annotations

import itertools
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from statestore.memory import InMemoryStateStore
from tests.integration.statestore.conftest import moto_endpoint_url as moto_endpoint_url

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}
PROPERTIES = {"sleeper.table.delete.purge.hours": "0",  # compaction purges every delete at once
              "sleeper.table.partition.splitting.threshold": "4"}
KEYS = st.integers(min_value=0, max_value=40)
VALUES = st.sampled_from(["a", "b"])
ROWS = st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=8)
_counter = itertools.count()


class DeletesMachine(RuleBasedStateMachine):
    """Drives a table and the model side by side."""

    sleeper: Sleeper  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.table = self.sleeper.create_table(f"m{next(_counter)}_{uuid.uuid4().hex[:6]}", SCHEMA,
                                               split_points=[20], properties=PROPERTIES)
        self.model: list[dict[str, Any]] = []

    @staticmethod
    def _arrow(rows: list[tuple[int, str]]) -> pa.Table:
        return pa.table({"key": pa.array([k for k, _ in rows], pa.int64()), "v": [v for _, v in rows]})

    @rule(rows=ROWS)
    def ingest(self, rows: list[tuple[int, str]]) -> None:
        self.table.ingest(self._arrow(rows))
        self.model.extend({"key": k, "v": v} for k, v in rows)

    @rule(rows=ROWS)
    def write(self, rows: list[tuple[int, str]]) -> None:
        self.table.write([{"key": k, "v": v} for k, v in rows])
        self.model.extend({"key": k, "v": v} for k, v in rows)

    @rule(lo=KEYS, width=st.integers(min_value=1, max_value=15), only=st.one_of(st.none(), VALUES))
    def delete(self, lo: int, width: int, only: Optional[str]) -> None:
        self.table.delete(ranges=[(lo, lo + width)], where=None if only is None else f"v = '{only}'")
        self.model = [r for r in self.model
                      if not (lo <= r["key"] < lo + width and (only is None or r["v"] == only))]

    @rule()
    def flush(self) -> None:
        self.table.flush()

    @rule()
    def compact(self) -> None:
        self.table.compact(runner="local")

    @rule()
    def split(self) -> None:
        self.table.split()

    @rule()
    def gc(self) -> None:
        self.table.gc(now_ms=int(time.time() * 1000) + 48 * 3_600_000)

    @invariant()
    def a_query_returns_the_model(self) -> None:
        got = self.table.query(ranges=[(0, None)]).to_pylist()
        assert sorted((r["key"], r["v"]) for r in got) == sorted((r["key"], r["v"]) for r in self.model)


def _run(sleeper: Sleeper, examples: int, steps: int) -> None:
    machine = type("Machine", (DeletesMachine,), {"sleeper": sleeper})
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))


@pytest.fixture
def memory_sleeper(tmp_path: Path) -> Iterator[Sleeper]:
    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    yield s
    s.close()


def test_deletes_follow_the_model_on_the_memory_store(memory_sleeper: Sleeper) -> None:
    _run(memory_sleeper, examples=60, steps=25)


def test_deletes_follow_the_model_on_postgresql(pg_dsn: str, tmp_path: Path) -> None:
    from statestore.postgres import PostgresStateStore

    with Sleeper(state_store=PostgresStateStore(pg_dsn), objects=ObjectStore(str(tmp_path / "data"))) as s:
        _run(s, examples=8, steps=15)


def test_deletes_follow_the_model_on_dynamodb(moto_endpoint_url: str, tmp_path: Path) -> None:
    from statestore.dynamodb import open_dynamodb
    from tests.integration.statestore.conftest import dynamodb_options

    store = open_dynamodb(**dynamodb_options(moto_endpoint_url, tmp_path / "blobs"))
    with Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data"))) as s:
        _run(s, examples=5, steps=12)


class AsOfMachine(DeletesMachine):
    """The same steps, and queries as of earlier transactions: the model keeps, for every
    transaction number seen, the records then in files (an as-of read excludes the write
    buffer). The history retention outlasts GC's clock, so every version stays readable."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeper.set_properties(self.table.name, {"sleeper.table.history.retention.minutes": "10000"})
        self.buffered: list[dict[str, Any]] = []
        self.versions: dict[int, list[tuple[int, str]]] = {}

    def _files_now(self) -> list[tuple[int, str]]:
        in_buffer = [(r["key"], r["v"]) for r in self.buffered]
        rest = [(r["key"], r["v"]) for r in self.model]
        for r in in_buffer:
            rest.remove(r)
        return sorted(rest)

    @rule(rows=ROWS)
    def write(self, rows: list[tuple[int, str]]) -> None:
        super().write(rows)
        self.buffered.extend({"key": k, "v": v} for k, v in rows)

    @rule(lo=KEYS, width=st.integers(min_value=1, max_value=15), only=st.one_of(st.none(), VALUES))
    def delete(self, lo: int, width: int, only: Optional[str]) -> None:
        super().delete(lo, width, only)
        self.buffered = [r for r in self.buffered
                         if not (lo <= r["key"] < lo + width and (only is None or r["v"] == only))]

    @rule()
    def flush(self) -> None:
        super().flush()
        self.buffered = []

    @invariant()
    def remember_this_version(self) -> None:
        newest = self.table.history(1)
        if newest:
            self.versions[newest[0].number] = self._files_now()

    @rule(data=st.data())
    def query_as_of(self, data: st.DataObject) -> None:
        if not self.versions:
            return
        number = data.draw(st.sampled_from(sorted(self.versions)))
        got = self.table.query(ranges=[(0, None)], as_of=number).to_pylist()
        assert sorted((r["key"], r["v"]) for r in got) == self.versions[number], f"as of {number}"


def _run_as_of(sleeper: Sleeper, examples: int, steps: int) -> None:
    machine = type("Machine", (AsOfMachine,), {"sleeper": sleeper})
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))


def test_as_of_queries_follow_every_version_of_the_model_on_the_memory_store(memory_sleeper: Sleeper) -> None:
    _run_as_of(memory_sleeper, examples=40, steps=25)


def test_as_of_queries_follow_every_version_of_the_model_on_postgresql(pg_dsn: str, tmp_path: Path) -> None:
    from statestore.postgres import PostgresStateStore

    with Sleeper(state_store=PostgresStateStore(pg_dsn), objects=ObjectStore(str(tmp_path / "data"))) as s:
        _run_as_of(s, examples=6, steps=15)


def test_as_of_queries_follow_every_version_of_the_model_on_dynamodb(moto_endpoint_url: str, tmp_path: Path) -> None:
    from statestore.dynamodb import open_dynamodb
    from tests.integration.statestore.conftest import dynamodb_options

    store = open_dynamodb(**dynamodb_options(moto_endpoint_url, tmp_path / "blobs"), snapshot_every=4)
    with Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data"))) as s:
        _run_as_of(s, examples=4, steps=12)
