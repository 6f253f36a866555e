"""PostgreSQL SIGKILLed in the middle of an ingest, a compaction and a split, then
restarted (crash recovery): every record is stored exactly once afterwards, every
referenced file exists, and what a failed writer left behind is only what the orphan
sweep may remove. Each test ends with an exact record count."""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pytest

from sleeper_ops.api import Sleeper
from sleeper_ops.io.storage import ObjectStore
from statestore.errors import SleeperError
from statestore.postgres import PostgresStateStore, create_database_if_missing
from tests.conftest import server_parent_dir
from tests.faults.killable_postgres import KillablePostgres

pytestmark = pytest.mark.integration

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}
RESTART_AFTER = 1.5  # seconds the server stays down


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KillablePostgres]:
    """One server for the module: its data directory is made once (initdb, then the
    embedded server started and stopped: seconds of a loaded machine per test); each
    test has a database of its own on it, and leaves the server running."""
    data = server_parent_dir(tmp_path_factory, "pg-killed")
    pg = KillablePostgres(data)
    pg.start()
    yield pg
    pg.stop()
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def pg(server: KillablePostgres) -> KillablePostgres:
    if not server.running():  # an earlier test failed while it was down
        server.start()
    return server


@pytest.fixture
def sleeper(pg: KillablePostgres, tmp_path: Path) -> Iterator[Sleeper]:
    database = f"sleeper_{uuid.uuid4().hex[:12]}"
    create_database_if_missing(pg.dsn, database)
    store = PostgresStateStore(pg.dsn_for(database), connect_timeout=10)
    with Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data"))) as s:
        yield s


def _rows(n: int, first: int = 0) -> pa.Table:
    return pa.table({"key": pa.array(range(first, first + n), pa.int64()), "v": [f"v{i}" for i in range(n)]})


def _crash_and_restart(pg: KillablePostgres) -> threading.Thread:
    """Kill the server now; start it again RESTART_AFTER seconds later (in a thread)."""
    pg.kill()
    restart = threading.Thread(target=lambda: (time.sleep(RESTART_AFTER), pg.start()))
    restart.start()
    return restart


def _kill_at_first_commit_of(sleeper: Sleeper, pg: KillablePostgres, txn_type: str) -> list[threading.Thread]:
    """Kill PostgreSQL just as the first commit of ``txn_type`` starts."""
    store: Any = sleeper.state_store
    real = store.commit
    restarts: list[threading.Thread] = []

    def commit(table_id, txn, **kw):  # type: ignore[no-untyped-def]
        if txn.TYPE == txn_type and not restarts:
            restarts.append(_crash_and_restart(pg))
        return real(table_id, txn, **kw)

    store.commit = commit
    return restarts


def _count_once(sleeper: Sleeper) -> int:
    t = sleeper.table("t")
    ids = t.query(ranges=[(-(2**63), None)]).column("key").to_pylist()
    assert len(ids) == len(set(ids)), "records returned twice"
    state = t.state()
    assert all(sleeper.objects.head(f) is not None for f in state.files), "a referenced file is gone"
    return len(ids)


def test_killed_at_an_ingest_commit_the_ingest_completes_once(sleeper: Sleeper, pg: KillablePostgres) -> None:
    t = sleeper.create_table("t", SCHEMA, split_points=[100_000])
    restarts = _kill_at_first_commit_of(sleeper, pg, "add_files")
    result = t.ingest(_rows(200_000))
    assert restarts, "the server was killed"
    restarts[0].join()
    assert result.records == 200_000
    assert _count_once(sleeper) == 200_000


@pytest.mark.parametrize("kill_after", [0.3, 1.2, 2.5])
def test_killed_at_some_moment_of_an_ingest_a_rerun_stores_each_record_once(sleeper: Sleeper, pg: KillablePostgres,
                                                                              kill_after: float) -> None:
    t = sleeper.create_table("t", SCHEMA, split_points=[500_000])
    data = _rows(1_000_000)
    killer = threading.Timer(kill_after, lambda: restarts.append(_crash_and_restart(pg)))
    restarts: list[threading.Thread] = []
    killer.start()
    try:
        t.ingest(data, max_chunk_rows=250_000)  # spills: long enough for the kill to land inside
        ran_through = True
    except SleeperError:
        ran_through = False  # failed before its commit: nothing committed, its files deleted
    killer.join()
    for r in restarts:
        r.join()
    if not ran_through:
        assert _count_once(sleeper) == 0
        t.ingest(data)
    assert _count_once(sleeper) == 1_000_000


def test_killed_at_a_compaction_commit_the_job_commits_once(sleeper: Sleeper, pg: KillablePostgres) -> None:
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.compaction.strategy": "basic"})
    for i in range(3):
        t.ingest(_rows(50_000, first=i * 50_000))
    restarts = _kill_at_first_commit_of(sleeper, pg, "replace_file_references")
    report = t.compact()
    assert restarts
    restarts[0].join()
    assert report.count("committed") == 1, report.summary()
    assert len(t.state().references) == 1
    assert _count_once(sleeper) == 150_000


def test_killed_at_a_split_commit_the_partition_splits_once(sleeper: Sleeper, pg: KillablePostgres) -> None:
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.partition.splitting.threshold": "1000"})
    t.ingest(_rows(20_000))
    restarts = _kill_at_first_commit_of(sleeper, pg, "split_partition")
    report = t.split()
    assert restarts
    restarts[0].join()
    assert len(report.splits) == 1
    state = t.state()
    assert len(state.partitions) == 3 and sum(p.is_leaf for p in state.partitions.values()) == 2
    assert _count_once(sleeper) == 20_000
