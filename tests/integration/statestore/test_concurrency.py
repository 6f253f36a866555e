"""Real processes and threads racing commits to one table on PostgreSQL."""

from __future__ import annotations

import multiprocessing
import queue
import threading
from pathlib import Path
from typing import Callable

import pytest

from statestore import (
    AddFiles,
    AssignJobIds,
    FileReference,
    FileReferenceError,
    JobAssignment,
    PartitionError,
    ReplaceFileReferences,
    Schema,
    SplitPartition,
    TransactionError,
    partitions_from_split_points,
)
from statestore.partitions import split_children
from statestore.postgres import PostgresStateStore

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}]})
WORKERS, COMMITS, FILES = 8, 50, 20


@pytest.fixture
def pg_store(pg_dsn):
    s = PostgresStateStore(pg_dsn, max_connections=8)
    yield s
    s.close()


def race(n: int, attempt: Callable[[int], None]) -> list[BaseException | None]:
    """Run ``attempt(i)`` in ``n`` threads released together; return each one's error."""
    barrier = threading.Barrier(n)
    outcome: list[BaseException | None] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            attempt(i)
        except BaseException as e:
            outcome[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a committer hung"
    return outcome


def test_processes_adding_files_at_once_lose_and_duplicate_nothing(pg_dsn, pg_store, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # spawned workers import their module by name
    from statestore_concurrency_workers import add_files_worker

    parts = partitions_from_split_points(SCHEMA, ["g", "n", "t"])
    table_id = pg_store.create_table("busy", SCHEMA, parts).table_id
    leaves = sorted(p.id for p in parts if p.is_leaf)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=add_files_worker, args=(pg_dsn, table_id, leaves, w, COMMITS, FILES, barrier, results))
             for w in range(WORKERS)]
    for p in procs:
        p.start()
    outcomes = []
    try:
        for _ in procs:
            outcomes.append(results.get(timeout=240))
    except queue.Empty:
        pytest.fail(f"workers did not finish; got {outcomes}")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    errors = [o for o in outcomes if o[0] != "ok"]
    assert not errors, errors[0][2]

    refs = pg_store.file_references(table_id)
    expected = {(f"w{w}/c{c}/f{i}.parquet", leaves[(c + i) % len(leaves)])
                for w in range(WORKERS) for c in range(COMMITS) for i in range(FILES)}
    got = [(r.filename, r.partition_id) for r in refs]
    assert len(got) == len(set(got)), "a reference is present twice"
    assert set(got) == expected, f"{len(expected - set(got))} references missing"
    state = pg_store.load_state(table_id)
    assert set(state.files) == {name for name, _ in expected}


def test_threads_racing_to_commit_one_compaction_job_let_exactly_one_win(pg_store):
    parts = partitions_from_split_points(SCHEMA, ["m"])
    table_id = pg_store.create_table("compacted", SCHEMA, parts).table_id
    leaf = sorted(p.id for p in parts if p.is_leaf)[0]
    for round_ in range(5):
        inputs = tuple(f"r{round_}/in{i}" for i in range(3))
        pg_store.commit(table_id, AddFiles(tuple(FileReference(f, leaf, 10) for f in inputs)))
        pg_store.commit(table_id, AssignJobIds((JobAssignment(f"job{round_}", leaf, inputs),)))

        def commit(i: int) -> None:
            pg_store.commit(table_id, ReplaceFileReferences(f"job{round_}", leaf, inputs,
                                                            FileReference(f"r{round_}/out{i}", leaf, 30)))

        outcome = race(8, commit)
        winners = [i for i, e in enumerate(outcome) if e is None]
        assert len(winners) == 1, outcome
        assert all(isinstance(e, FileReferenceError) for e in outcome if e is not None), outcome
        state = pg_store.load_state(table_id)
        outputs = {f for f in state.files if f.startswith(f"r{round_}/out")}
        assert outputs == {f"r{round_}/out{winners[0]}"}
        assert not any(state.reference_count(f) for f in inputs)


def test_threads_racing_to_split_one_partition_let_exactly_one_win(pg_store):
    parts = partitions_from_split_points(SCHEMA)
    table_id = pg_store.create_table("split", SCHEMA, parts).table_id
    root = parts[0]

    def split(i: int) -> None:
        pg_store.commit(table_id, SplitPartition(*split_children(root, 0, f"k{i}", f"left{i}", f"right{i}")))

    outcome = race(8, split)
    winners = [i for i, e in enumerate(outcome) if e is None]
    assert len(winners) == 1 and all(isinstance(e, PartitionError) for e in outcome if e is not None), outcome
    assert set(pg_store.load_state(table_id).partitions) == {root.id, f"left{winners[0]}", f"right{winners[0]}"}


def test_threads_racing_to_assign_one_file_to_jobs_let_exactly_one_win(pg_store):
    parts = partitions_from_split_points(SCHEMA)
    table_id = pg_store.create_table("assigned", SCHEMA, parts).table_id
    pg_store.commit(table_id, AddFiles((FileReference("f", "root", 1),)))

    def assign(i: int) -> None:
        pg_store.commit(table_id, AssignJobIds((JobAssignment(f"job{i}", "root", ("f",)),)))

    outcome = race(8, assign)
    winners = [i for i, e in enumerate(outcome) if e is None]
    assert len(winners) == 1 and all(isinstance(e, TransactionError) for e in outcome if e is not None), outcome
    assert pg_store.load_state(table_id).references[("f", "root")].job_id == f"job{winners[0]}"
