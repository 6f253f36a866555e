"""Deletes and the proof of erasure (issue 22) on the in-memory store: a delete hides
matching records of files, the buffer and running ingests from every read at once,
records written after it stay, compaction purges them (forced past
``sleeper.table.delete.purge.hours``; wholly deleted files dropped unread), GC drops
the spent tombstone, and the erasure report lists what still holds rows until none does."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from sleeper_ops.engine.deletes import DeleteInputError

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "sortKeyFields": [],
          "valueFields": [{"name": "v", "type": "StringType"}]}
FAR_FUTURE = int(time.time() * 1000) + 10 * 24 * 3_600_000


@pytest.fixture
def t(sleeper):  # type: ignore[no-untyped-def]
    return sleeper.create_table("t", SCHEMA, split_points=[100, 200])


def _rows(lo: int, hi: int, v: str = "a") -> pa.Table:
    return pa.table({"key": pa.array(range(lo, hi), pa.int64()), "v": [f"{v}{i % 3}" for i in range(lo, hi)]})


def keys(t, lo=0, hi=None):  # type: ignore[no-untyped-def]
    return t.query(ranges=[(lo, hi)])["key"].to_pylist()


def test_a_delete_hides_matching_records_of_files_and_buffer_from_query_and_sql(t) -> None:  # type: ignore[no-untyped-def]
    t.ingest(_rows(0, 300))
    t.write(_rows(300, 320).to_pylist())
    r = t.delete(ranges=[(50, 150), (305, 310)])
    assert r.applied and r.tombstone == 1
    expected = [k for k in range(320) if not (50 <= k < 150 or 305 <= k < 310)]
    assert keys(t) == expected
    assert sorted(t.sleeper.sql("SELECT key FROM t")["key"].to_pylist()) == expected
    assert list(pa.concat_tables([pa.Table.from_batches([b]) for b in t.query_batches(ranges=[(0, None)],
                                                                                       batch_rows=7)])
                ["key"].to_pylist()) == expected


def test_a_predicate_deletes_only_the_records_it_is_true_for(t) -> None:  # type: ignore[no-untyped-def]
    t.ingest(_rows(0, 30))
    t.delete(ranges=[(0, 20)], where="v = 'a1' OR key = 3")
    assert keys(t) == [k for k in range(30) if not (k < 20 and (k % 3 == 1 or k == 3))]


def test_records_written_ingested_or_flushed_after_a_delete_stay(t) -> None:  # type: ignore[no-untyped-def]
    t.ingest(_rows(0, 10))
    t.write(_rows(10, 20).to_pylist())
    t.delete(ranges=[(0, 100)])
    t.ingest(_rows(0, 5, "b"))
    t.write(_rows(15, 17, "c").to_pylist())
    assert keys(t) == [0, 1, 2, 3, 4, 15, 16]
    flushed = t.flush()
    assert flushed.records == 2  # the deleted buffered records were not written to a file
    assert keys(t) == [0, 1, 2, 3, 4, 15, 16]
    assert t.query(keys=[15])["v"].to_pylist() == ["c0"]


def test_an_ingest_already_reading_when_a_delete_commits_loses_its_matching_records(t) -> None:  # type: ignore[no-untyped-def]
    def batches():  # type: ignore[no-untyped-def]
        yield from _rows(0, 10).to_batches()
        t.delete(ranges=[(0, 5)])  # commits while the ingest is reading its input
        yield from _rows(10, 20).to_batches()
    t.ingest(batches())
    assert keys(t) == list(range(5, 20))
    t.ingest(_rows(0, 3, "late"))  # started after the delete: written after it
    assert keys(t) == [0, 1, 2, *range(5, 20)]


def test_compaction_purges_deleted_rows_and_gc_then_drops_the_tombstone(t) -> None:  # type: ignore[no-untyped-def]
    t.ingest(_rows(0, 300))
    t.ingest(_rows(0, 300, "b"))
    t.delete(ranges=[(120, 130)])
    before = t.erasure_report(ranges=[(120, 130)])
    files = [h for h in before.held if h.kind == "file"]
    assert not before.clean and {h.kind for h in before.held} == {"file", "state store record"} and len(files) == 2
    assert all(h.rows == 10 and h.hidden == 10 for h in files)
    assert [h.name.split(" (")[0] for h in before.held if h.kind == "state store record"] == [
        "tombstone 1", "history: the body of transaction 3"]
    t.sleeper.set_properties("t", {"sleeper.table.delete.purge.hours": "0"})  # purge now
    t.compact(runner="local")
    assert keys(t, 100, 200) == sorted([*range(100, 120), *range(130, 200)] * 2)
    awaiting = t.erasure_report(ranges=[(120, 130)])
    assert {h.kind for h in awaiting.held} == {"file awaiting GC", "state store record"}
    report = t.gc(now_ms=FAR_FUTURE)
    assert report.tombstones_dropped == [1] and not t.state().tombstones
    assert t.erasure_report(ranges=[(120, 130)]).clean
    assert keys(t, 100, 200) == sorted([*range(100, 120), *range(130, 200)] * 2)


def test_past_the_purge_age_compaction_makes_a_job_for_a_lone_file(t) -> None:  # type: ignore[no-untyped-def]
    t.ingest(_rows(0, 50))
    t.delete(keys=[7])
    files = set(t.state().files)
    t.compact(runner="local")  # deleted minutes ago, within the purge age: the strategy waits for more files
    assert set(t.state().files) == files
    t.sleeper.set_properties("t", {"sleeper.table.delete.purge.hours": "0"})
    t.compact(runner="local")
    assert t.erasure_report(keys=[7]).held[0].kind == "file awaiting GC"
    assert keys(t) == [k for k in range(50) if k != 7]


def test_a_file_a_delete_covers_whole_is_dropped_by_reference_without_being_read(t, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    t.ingest(_rows(0, 50))
    t.sleeper.set_properties("t", {"sleeper.table.delete.purge.hours": "0"})
    t.delete(ranges=[(0, 100)])
    import sleeper_ops.compaction.execute as execute

    def never(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("a wholly deleted file was merged")
    monkeypatch.setattr(execute, "merge_sorted", never)
    t.compact(runner="local")
    assert not t.state().references and keys(t) == []


def test_a_repeated_idempotency_key_adds_no_second_tombstone(t) -> None:  # type: ignore[no-untyped-def]
    t.delete(keys=[1])
    first = t.delete(keys=[3], request_id="erase-3")
    again = t.delete(keys=[3], request_id="erase-3")
    assert first.applied and not again.applied and t.state().delete_count == 2
    assert again.tombstone == first.tombstone == 2  # the repeat answers the first result
    assert "delete 2 was committed before" in again.summary()


def test_a_delete_key_reused_for_another_delete_is_refused_naming_the_key(t) -> None:  # type: ignore[no-untyped-def]
    from statestore.client_writes import IdempotencyKeyReusedError

    t.ingest(_rows(0, 10))
    t.delete(keys=[3], request_id="erase-7")
    for other in ({"keys": [4]}, {"ranges": [(3, 5)]}, {"keys": [3], "where": "v = 'a0'"}):
        with pytest.raises(IdempotencyKeyReusedError, match="idempotency key 'erase-7' was already used"):
            t.delete(request_id="erase-7", **other)
    assert t.state().delete_count == 1
    assert keys(t) == [0, 1, 2, 4, 5, 6, 7, 8, 9]  # key 4 was not silently "already deleted": it is still there


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"ranges": [(5, 5)]}, "empty"),
    ({"ranges": [(9, 2)]}, "empty"),
    ({}, "give a key or a range"),
    ({"keys": [1], "where": "nope = 1"}, "No field named nope"),
    ({"keys": [1], "where": "v = = 1"}, "not a predicate"),
])
def test_bad_input_is_refused_in_one_line_and_deletes_nothing(t, kwargs, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DeleteInputError, match=match) as e:
        t.delete(**kwargs)
    assert "\n" not in str(e.value)
    assert t.state().delete_count == 0


def test_a_flush_of_only_deleted_records_empties_the_buffer_and_writes_no_file(t) -> None:  # type: ignore[no-untyped-def]
    t.write(_rows(0, 10).to_pylist())
    t.delete(ranges=[(0, 100)])
    r = t.flush()
    assert r.records == 0 and r.files == 0
    assert t.buffer_stats().entries == 0 and not t.state().files and keys(t) == []


def test_a_bulk_import_already_running_when_a_delete_commits_loses_its_matching_records(sleeper, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    from sleeper_ops.bulk_import.job import ImportPlan, bulk_import
    from tests.unit.sleeper_ops.test_bulk_import_job import SCHEMA as IMPORT_SCHEMA
    from tests.unit.sleeper_ops.test_bulk_import_job import local_runner

    t = sleeper.create_table("imp", IMPORT_SCHEMA)
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(pa.table({"key": pa.array(range(100), pa.int64()), "v": ["x"] * 100}), src / "a.parquet")
    runner = local_runner(sleeper)

    def run(plan: ImportPlan):  # type: ignore[no-untyped-def]
        t.delete(ranges=[(10, 20)])  # commits while the import is running
        return runner(plan)
    assert bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(src)], run=run, import_key="k").records == 100
    assert keys(t) == [k for k in range(100) if not 10 <= k < 20]
    again = tmp_path / "again"
    again.mkdir()
    pq.write_table(pa.table({"key": pa.array([15], pa.int64()), "v": ["y"]}), again / "b.parquet")
    bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(again)], run=runner, import_key="k2")
    assert t.query(keys=[15])["v"].to_pylist() == ["y"]  # an import started after the delete keeps its records


def _import_running_across_a_delete(sleeper, t):  # type: ignore[no-untyped-def]
    """An import that named its output and read the delete count, then a delete of key 5
    and a compaction that purges it from the files; returns (import record, output, horizon)."""
    from sleeper_ops.io.datafile import new_data_key
    from statestore.jobs import JobRecord

    st, tid = sleeper.state_store, t.info.table_id
    t.ingest(_rows(0, 10))
    out = new_data_key(tid, "root")
    rec = JobRecord.created(tid, "import-1", "bulk_import").started("run", outputs=[out])
    st.put_job(rec)
    horizon = st.tombstones(tid)[0]
    time.sleep(0.002)
    t.delete(keys=[5])
    t.compact()
    return rec, out, horizon


def _commit_import(sleeper, t, rec, out, horizon):  # type: ignore[no-untyped-def]
    """The import writes what it read (key 5 among it) and commits it."""
    from sleeper_ops.io.datafile import ParquetSettings, write_data_file
    from statestore.files import FileReference
    from statestore.transactions import AddFiles

    write_data_file(sleeper.objects, out, t.info.schema, _rows(5, 6, "import"), ParquetSettings.of(t.info))
    sleeper.state_store.commit(t.info.table_id, AddFiles((FileReference(out, "root", 1, delete_horizon=horizon),)),
                               job=rec.finished(1, 1).committed())


def test_a_tombstone_stays_while_a_job_begun_before_it_is_open_however_many_jobs_follow(sleeper) -> None:  # type: ignore[no-untyped-def]
    from sleeper_ops.maintenance.gc import collect_garbage
    from statestore.jobs import JobRecord

    t = sleeper.create_table("one", SCHEMA, properties={"sleeper.table.delete.purge.hours": "0"})
    st, tid = sleeper.state_store, t.info.table_id
    rec, out, horizon = _import_running_across_a_delete(sleeper, t)
    for i in range(1_500):  # flushes, compactions...: far more than any page of recent jobs
        st.put_job(JobRecord.created(tid, f"later-{i}", "compaction").started().finished(0, 0).committed())
    st.heartbeat_jobs(tid, [rec.job_id], FAR_FUTURE)  # the import is alive and well
    g = collect_garbage(st, sleeper.objects, st.get_table("one"), now_ms=FAR_FUTURE)
    assert g.tombstones_dropped == [] and len(st.tombstones(tid)[1]) == 1
    _commit_import(sleeper, t, rec, out, horizon)
    assert keys(t) == [0, 1, 2, 3, 4, 6, 7, 8, 9], "the delete holds for what the import read before it"


def test_a_job_silent_for_the_abandon_time_is_fenced_and_holds_no_tombstone(sleeper) -> None:  # type: ignore[no-untyped-def]
    from sleeper_ops.maintenance.gc import collect_garbage
    from statestore.errors import BookkeepingError

    t = sleeper.create_table("one", SCHEMA, properties={"sleeper.table.delete.purge.hours": "0"})
    st, tid = sleeper.state_store, t.info.table_id
    rec, out, horizon = _import_running_across_a_delete(sleeper, t)
    g = collect_garbage(st, sleeper.objects, st.get_table("one"), now_ms=FAR_FUTURE)
    assert len(g.tombstones_dropped) == 1, "a job that stopped beating holds no tombstone for ever"
    stored = st.get_job(tid, rec.job_id)
    assert stored is not None and stored.status == "failed" and stored.reason.startswith("abandoned:")
    with pytest.raises(BookkeepingError, match="declared abandoned"):
        _commit_import(sleeper, t, rec, out, horizon)
    assert keys(t) == [0, 1, 2, 3, 4, 6, 7, 8, 9]


def test_a_file_split_between_leaves_is_rewritten_by_every_leaf_once_a_delete_of_its_records_is_overdue(
        sleeper) -> None:  # type: ignore[no-untyped-def]
    """Found by the erasure oracle (a CI run): a file written before a split is referenced
    from both new leaves, each reading its own range. A delete of keys in the left leaf's
    range made the left leaf rewrite its part, but the right leaf's reference, whose range
    the delete does not meet, kept the whole file alive: its deleted records stayed on
    disk, unreadable, and the erasure report could never come clean."""
    t = sleeper.create_table("split", SCHEMA, properties={"sleeper.table.partition.splitting.threshold": "100"})
    t.ingest(_rows(0, 300))
    (old,) = t.state().files
    t.split()
    assert sum(1 for p in t.state().partitions.values() if p.is_leaf) == 2
    t.delete(ranges=[(10, 20)])
    t.sleeper.set_properties("split", {"sleeper.table.delete.purge.hours": "0"})
    t.compact(runner="local")
    assert old not in {r.filename for r in t.state().references.values()}, \
        "a leaf still references the file that holds the deleted records"
    t.gc(now_ms=FAR_FUTURE)
    assert t.erasure_report(ranges=[(10, 20)]).clean
    assert keys(t) == [k for k in range(300) if not 10 <= k < 20]
