"""A warm query reads its files while the state store answers (QueryRunner._read_guessed):
the reads overlap the round trip, and a guess the answer proves stale is never returned."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from sleeper_ops.errors import StorageError
from sleeper_ops.query.runner import exact_key_region, range_region
from tests.unit.sleeper_ops.test_query import LONG_MIN, SCHEMA, as_table, counter, got, make_rows


@pytest.fixture
def warm(sleeper):
    """A table of two leaves holding 1000 rows in two ingests, and a runner whose metadata
    copy has been read once (so the next query guesses)."""
    t = sleeper.create_table("t", SCHEMA, split_points=[200],
                               properties={"sleeper.table.compaction.strategy": "basic"})
    rows = make_rows(1000)
    t.ingest(as_table(rows[:500]))
    t.ingest(as_table(rows[500:]))
    runner = t.query_runner(threads=2)
    assert got(runner.query([range_region(t.schema, LONG_MIN, None)])) == counter(rows)
    yield t, rows, runner
    runner.close()


def _count_reads(runner, monkeypatch) -> list[str]:
    """The file of each task the runner reads from now on, in a list."""
    read: list[str] = []
    real = runner._read_at  # every read of a file's row groups goes through it

    def _read_at(task, md, groups, before_decode=None):
        read.append(task.ref.filename)
        return real(task, md, groups, before_decode)

    monkeypatch.setattr(runner, "_read_at", _read_at)
    return read


def test_a_warm_lookup_reads_its_file_before_the_state_stores_answer_returns(warm, monkeypatch):
    """The state store's answer is held back until a data file has been opened: only a
    read that overlaps the round trip gets past it (no overlap: the wait times out)."""
    t, rows, runner = warm
    reading = threading.Event()
    overlapped: list[bool] = []
    real_open, real_changes = runner.objects.open_input, runner.state_store.changes_since

    def open_input(key):
        reading.set()
        return real_open(key)

    def changes_since(table_id, token):
        overlapped.append(reading.wait(5))
        return real_changes(table_id, token)

    monkeypatch.setattr(runner.objects, "open_input", open_input)
    monkeypatch.setattr(runner.state_store, "changes_since", changes_since)
    for key in (3, 250):
        reading.clear()
        assert got(runner.query([exact_key_region(t.schema, [key])])) == counter(r for r in rows if r["key"] == key)
    assert overlapped == [True, True]


def test_an_unchanged_table_is_read_once_per_query(warm, monkeypatch):
    t, rows, runner = warm
    read = _count_reads(runner, monkeypatch)
    result = runner.query([range_region(t.schema, 0, 100)])
    assert got(result) == counter(r for r in rows if r["key"] < 100)
    assert len(read) == 2  # the leaf's two files, each once: the guess was kept


def test_a_guess_made_stale_by_a_commit_since_is_replaced_by_the_plans_reads(warm, monkeypatch):
    t, rows, runner = warm
    more = make_rows(300, seed=7, first_id=1000)
    t.ingest(as_table(more))  # the runner's copy does not know the new files yet: its guess is stale
    read = _count_reads(runner, monkeypatch)
    result = runner.query([range_region(t.schema, 0, 100)])
    expected = counter(r for r in rows + more if r["key"] < 100)
    assert got(result) == expected
    assert result.num_rows == sum(expected.values())
    assert len(read) == 2 + 3  # the guess's two files, then the plan's three


def test_a_guess_naming_files_already_collected_answers_from_the_plans_files(warm):
    """Compaction replaces the leaf's files and GC deletes the old ones before the runner's
    next query: its guess names files that are gone. The failed reads are dropped, the
    plan's file is read, and every record is returned once."""
    t, rows, runner = warm
    t.compact(runner="local")
    t.gc(now_ms=int(time.time() * 1000) + 3_600_000)  # an hour on: past the GC delay
    per_leaf = Counter(r.partition_id for r in t.state().references.values())
    assert sorted(per_leaf.values()) == [1, 1]
    result = runner.query([range_region(t.schema, LONG_MIN, None)])
    assert got(result) == counter(rows)
    assert result.num_rows == 1000


def test_a_file_missing_from_both_the_guess_and_the_plan_is_an_error(warm):
    t, rows, runner = warm
    runner.objects.delete(next(iter(t.state().references.values())).filename)
    with pytest.raises(StorageError):
        runner.query([range_region(t.schema, LONG_MIN, None)])


def test_concurrent_warm_queries_each_get_their_own_answer(warm):
    t, rows, runner = warm
    deadline = time.monotonic() + 30

    def ask(seed: int) -> None:
        for i in range(40):
            key = (seed * 37 + i * 11) % 400
            want = counter(r for r in rows if r["key"] == key)
            assert got(runner.query([exact_key_region(t.schema, [key])])) == want
            assert time.monotonic() < deadline

    with ThreadPoolExecutor(4) as pool:  # a thread's failure is raised here
        list(pool.map(ask, range(4)))


def test_a_guess_that_fails_leaves_the_query_to_the_plan(warm, monkeypatch):
    t, rows, runner = warm

    def broken(fn):
        raise RuntimeError("a guess on a copy that cannot be planned")

    monkeypatch.setattr(runner.metadata, "guess", broken)
    result = runner.query([exact_key_region(t.schema, [5])])
    assert got(result) == counter(r for r in rows if r["key"] == 5)
