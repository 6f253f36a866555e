"""Garbage collection: unreferenced files after the delay, in batches; the orphan sweep."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest

from sleeper_ops.io.datafile import new_data_key, sketch_key, write_data_file
from sleeper_ops.maintenance.gc import collect_garbage, sweep_orphans
from statestore.errors import CommitConflictError, FileReferenceError
from statestore.files import FileReference
from statestore.partitions import ROOT_ID
from statestore.transactions import AddFiles, AssignJobIds, DeleteFiles, JobAssignment, ReplaceFileReferences

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}
MINUTE = 60_000
NOW = int(time.time() * 1000)
HOUR_AGO = NOW - 60 * MINUTE


def _table(sleeper, **props):
    """A table whose GC waits out only its delay (no history retention) unless told."""
    props = {"sleeper_table_history_retention_minutes": "0", **props}
    return sleeper.create_table("t", SCHEMA, properties={k.replace("_", "."): v for k, v in props.items()})


def _ingest_files(t, n: int) -> list[str]:
    """Ingest ``n`` files into the root partition; return their names."""
    names = []
    for i in range(n):
        r = t.ingest(pa.table({"key": [i * 10 + j for j in range(10)], "v": ["x"] * 10}))
        names += [f.filename for f in r.files]
    return names


def _unreference(sleeper, t, names: list[str], when_ms: int) -> None:
    """Compact ``names`` away (as a job writing no output) at ``when_ms``."""
    store, tid = sleeper.state_store, t.info.table_id
    store.commit(tid, AssignJobIds((JobAssignment("job", ROOT_ID, tuple(names)),), update_time=when_ms))
    store.commit(tid, ReplaceFileReferences("job", ROOT_ID, tuple(names), None, update_time=when_ms))


def _exists(sleeper, key: str) -> bool:
    return sleeper.objects.head(key) is not None


def _gc(sleeper, t, **kw):
    return collect_garbage(sleeper.state_store, sleeper.objects, sleeper.table(t.name).info, **kw)


def _set_mtime(sleeper, key: str, when_ms: int) -> None:
    os.utime(sleeper.objects.path(key), (when_ms / 1000, when_ms / 1000))


def _put_orphan(sleeper, key: str, when_ms: int) -> str:
    sleeper.objects.put(key, b"junk")
    _set_mtime(sleeper, key, when_ms)
    return key


class CountingCommits:
    """Wraps a state store's commit: counts DeleteFiles commits, fails the first ``fail`` of them."""

    def __init__(self, store, fail: int = 0):
        self.store, self.real, self.fail, self.deletes = store, store.commit, fail, []

    def __call__(self, table_id, txn):
        if isinstance(txn, DeleteFiles):
            if self.fail:
                self.fail -= 1
                raise CommitConflictError("injected failure after the objects were deleted")
            self.deletes.append(txn.filenames)
        return self.real(table_id, txn)


def test_unreferenced_file_older_than_delay_is_deleted_with_its_sidecar(sleeper):
    t = _table(sleeper)
    [old, kept] = _ingest_files(t, 2)
    _unreference(sleeper, t, [old], HOUR_AGO)

    report = _gc(sleeper, t, now_ms=NOW)

    assert report.deleted == [old] and report.commits == 1 and not report.dry_run
    assert not _exists(sleeper, old) and not _exists(sleeper, sketch_key(old))
    assert old not in t.state().files
    assert _exists(sleeper, kept) and _exists(sleeper, sketch_key(kept)) and kept in t.state().files
    assert report.summary() == "t: deleted 1 unreferenced file and 0 orphan objects"


def test_unreferenced_file_younger_than_delay_is_kept(sleeper):
    t = _table(sleeper, sleeper_table_gc_delay_minutes="15")
    [young] = _ingest_files(t, 1)
    _unreference(sleeper, t, [young], NOW - 14 * MINUTE)

    report = _gc(sleeper, t, now_ms=NOW)

    assert report.deleted == []
    assert _exists(sleeper, young) and young in t.state().files
    assert _gc(sleeper, t, now_ms=NOW + 2 * MINUTE).deleted == [young]


def test_gc_counts_what_waits_for_the_delay_and_the_grace_and_says_when_the_first_is_due(sleeper):
    t = _table(sleeper, sleeper_table_gc_delay_minutes="5")
    names = _ingest_files(t, 4)
    _unreference(sleeper, t, names[:3], NOW - 2 * MINUTE)  # due in 3 minutes
    young = _put_orphan(sleeper, f"{t.info.table_id}/data/partition_{ROOT_ID}/lost.parquet", NOW - 20 * MINUTE)

    report = _gc(sleeper, t, now_ms=NOW, dry_run=True, explain=True)

    assert report.deleted == [] and report.orphans_deleted == []
    assert report.waiting is not None and (report.waiting.files, report.waiting.orphans) == (3, 1)
    assert report.summary() == (
        "t: would delete 0 unreferenced files and 0 orphan objects; 3 unreferenced files wait out the 5-minute "
        "GC delay (the first is due in 3 min 0 s); 1 untracked object waits out the 60-minute orphan grace "
        "(the first is due in 40 min 0 s)")
    assert _exists(sleeper, young)
    later = _gc(sleeper, t, now_ms=NOW + 3 * MINUTE + 1, explain=True)
    assert len(later.deleted) == 3 and later.waiting is not None and later.waiting.files == 0
    assert sleeper.table("t").gc(dry_run=True).waiting is None, "scheduled runs do not read the state twice"
    assert sleeper.table("t").gc(dry_run=True, explain=True).waiting is not None


def test_referenced_file_is_never_deleted(sleeper):
    t = _table(sleeper, sleeper_table_gc_delay_minutes="1")
    [ref] = _ingest_files(t, 1)
    for key in (ref, sketch_key(ref)):
        _set_mtime(sleeper, key, NOW - 10_000 * MINUTE)
    before = t.state().canonical()

    report = _gc(sleeper, t, now_ms=NOW + 10_000 * MINUTE)

    assert report.deleted == [] and report.orphans_deleted == []
    assert _exists(sleeper, ref) and _exists(sleeper, sketch_key(ref))
    with pytest.raises(FileReferenceError, match="still referenced"):
        sleeper.state_store.commit(t.info.table_id, DeleteFiles((ref,)))
    assert t.state().canonical() == before


def test_dry_run_lists_what_would_go_and_changes_nothing(sleeper):
    t = _table(sleeper, sleeper_table_gc_batch_size="1")
    names = _ingest_files(t, 3)
    _unreference(sleeper, t, names[:2], HOUR_AGO)
    orphan = _put_orphan(sleeper, f"{t.info.table_id}/data/partition_x/lost.parquet", NOW - 120 * MINUTE)
    before = t.state().canonical()
    listed_before = sorted(o.key for o in sleeper.objects.list(t.info.table_id))

    report = _gc(sleeper, t, now_ms=NOW, dry_run=True)

    assert report.dry_run and sorted(report.deleted) == sorted(names[:2]) and report.orphans_deleted == [orphan]
    assert report.commits == 0
    assert t.state().canonical() == before
    assert sorted(o.key for o in sleeper.objects.list(t.info.table_id)) == listed_before
    assert report.summary().startswith("t: would delete 2 unreferenced files and 1 orphan object")


def test_files_are_deleted_in_batches_one_commit_each(sleeper, monkeypatch):
    t = _table(sleeper, sleeper_table_gc_batch_size="2")
    names = _ingest_files(t, 5)
    _unreference(sleeper, t, names, HOUR_AGO)
    commits = CountingCommits(sleeper.state_store)
    monkeypatch.setattr(sleeper.state_store, "commit", commits)
    progress = []

    report = _gc(sleeper, t, now_ms=NOW, progress=progress.append)

    assert [len(b) for b in commits.deletes] == [2, 2, 1] and report.commits == 3
    assert sorted(report.deleted) == sorted(names) and progress == [2, 2, 1]
    assert t.state().files == {}
    assert list(sleeper.objects.list(t.info.table_id)) == []


def test_crash_between_object_delete_and_commit_is_finished_by_the_next_run(sleeper, monkeypatch):
    t = _table(sleeper, sleeper_table_gc_batch_size="2")
    names = sorted(_ingest_files(t, 3))
    _unreference(sleeper, t, names, HOUR_AGO)
    monkeypatch.setattr(sleeper.state_store, "commit", CountingCommits(sleeper.state_store, fail=1))

    with pytest.raises(CommitConflictError):
        _gc(sleeper, t, now_ms=NOW)

    # the first batch's objects are gone but the state store still tracks the files
    first = names[:2]
    assert all(not _exists(sleeper, k) for f in first for k in (f, sketch_key(f)))
    assert set(t.state().files) == set(names)

    report = _gc(sleeper, t, now_ms=NOW)

    assert sorted(report.deleted) == names and report.refused == []
    assert t.state().files == {} and list(sleeper.objects.list(t.info.table_id)) == []


def test_files_forgotten_concurrently_are_reported_and_the_rest_committed(sleeper, monkeypatch):
    t = _table(sleeper)
    names = sorted(_ingest_files(t, 3))
    _unreference(sleeper, t, names, HOUR_AGO)
    store = sleeper.state_store
    real = store.unreferenced_files

    def stale_listing(table_id, before, limit=1000):
        listed = real(table_id, before, limit)
        if names[1] in listed:  # another run forgets one file between our listing and commit
            store.commit(table_id, DeleteFiles((names[1],)))
        return listed

    monkeypatch.setattr(store, "unreferenced_files", stale_listing)
    report = _gc(sleeper, t, now_ms=NOW)

    assert sorted(report.deleted) == [names[0], names[2]]
    assert [f for f, _ in report.refused] == [names[1]] and "not tracked" in report.refused[0][1]
    assert t.state().files == {} and "1 refused" in report.summary()


def test_orphan_sweep_deletes_old_untracked_objects_only(sleeper):
    t = _table(sleeper)
    tid = t.info.table_id
    [tracked] = _ingest_files(t, 1)
    [unref] = _ingest_files(t, 1)
    _unreference(sleeper, t, [unref], NOW - MINUTE)  # tracked, unreferenced, young: GC's, not the sweep's
    long_ago = NOW - 61 * MINUTE
    for key in (tracked, sketch_key(tracked), unref, sketch_key(unref)):
        _set_mtime(sleeper, key, long_ago)
    old_data = _put_orphan(sleeper, f"{tid}/data/partition_{ROOT_ID}/old.parquet", long_ago)
    old_sidecar = _put_orphan(sleeper, sketch_key(old_data), long_ago)
    young = _put_orphan(sleeper, f"{tid}/data/partition_{ROOT_ID}/young.parquet", NOW - 59 * MINUTE)
    elsewhere = _put_orphan(sleeper, f"{tid}/other/old.bin", long_ago)
    other_table = _put_orphan(sleeper, f"not-{tid}/data/old.parquet", long_ago)

    deleted = sweep_orphans(sleeper.state_store, sleeper.objects, t.info, now_ms=NOW)

    assert deleted == sorted([old_data, old_sidecar])
    for key in (old_data, old_sidecar):
        assert not _exists(sleeper, key)
    for key in (tracked, sketch_key(tracked), unref, sketch_key(unref), young, elsewhere, other_table):
        assert _exists(sleeper, key), key


def test_file_written_but_not_committed_survives_the_sweep_until_the_grace_period(sleeper):
    t = _table(sleeper, sleeper_table_gc_orphan_grace_minutes="45")
    key = new_data_key(t.info.table_id, ROOT_ID)
    written = write_data_file(sleeper.objects, key, t.schema, pa.table({"key": [1, 2], "v": ["a", "b"]}))

    assert _gc(sleeper, t).orphans_deleted == []  # now: the file is seconds old
    assert _exists(sleeper, key) and _exists(sleeper, sketch_key(key))
    sleeper.state_store.commit(t.info.table_id, AddFiles((FileReference(key, ROOT_ID, written.record_count),)))
    assert _gc(sleeper, t, now_ms=int(time.time() * 1000) + 31 * MINUTE).orphans_deleted == []
    assert t.query(keys=[2]).num_rows == 1


def test_orphan_grace_can_be_overridden_and_sweep_can_be_turned_off(sleeper):
    t = _table(sleeper)
    orphan = _put_orphan(sleeper, f"{t.info.table_id}/data/partition_{ROOT_ID}/x.parquet", NOW - 10 * MINUTE)

    assert _gc(sleeper, t, now_ms=NOW, orphans=False).orphans_deleted == []
    assert sweep_orphans(sleeper.state_store, sleeper.objects, t.info, now_ms=NOW) == []
    assert sweep_orphans(sleeper.state_store, sleeper.objects, t.info, now_ms=NOW, grace_minutes=5,
                         dry_run=True) == [orphan]
    assert _exists(sleeper, orphan)
    assert sweep_orphans(sleeper.state_store, sleeper.objects, t.info, now_ms=NOW, grace_minutes=5) == [orphan]
    assert not _exists(sleeper, orphan)


def test_offline_table_is_skipped(sleeper):
    t = _table(sleeper, sleeper_table_online="false")
    names = _ingest_files(t, 1)
    _unreference(sleeper, t, names, HOUR_AGO)
    orphan = _put_orphan(sleeper, f"{t.info.table_id}/data/partition_{ROOT_ID}/x.parquet", HOUR_AGO)
    before = t.state().canonical()

    report = _gc(sleeper, t, now_ms=NOW)

    assert report.skipped_reason == "table t is offline" and report.deleted == report.orphans_deleted == []
    assert report.summary() == "t: skipped (table t is offline)"
    assert sweep_orphans(sleeper.state_store, sleeper.objects, sleeper.table("t").info, now_ms=NOW) == []
    assert t.state().canonical() == before
    assert _exists(sleeper, names[0]) and _exists(sleeper, orphan)


def test_a_slow_jobs_output_survives_the_sweep_past_the_grace_period_until_the_job_ends(sleeper):
    """The seam of issue 9 item 1: a job that writes, then takes longer than the grace
    period to commit, must not find its output swept."""
    from statestore.jobs import JobRecord

    t = _table(sleeper)  # grace 60 minutes, abandon 1440 minutes
    store, tid = sleeper.state_store, t.info.table_id
    key = new_data_key(tid, ROOT_ID)
    rec = JobRecord.created(tid, "slow", "compaction").started("run", outputs=[key])
    store.put_job(rec)  # named before it is written
    written = write_data_file(sleeper.objects, key, t.schema, pa.table({"key": [1, 2], "v": ["a", "b"]}))
    _set_mtime(sleeper, key, NOW - 120 * MINUTE)
    _set_mtime(sleeper, sketch_key(key), NOW - 120 * MINUTE)

    assert _gc(sleeper, t, now_ms=NOW).orphans_deleted == []  # two hours old, but its job is in flight
    store.commit(tid, AddFiles((FileReference(key, ROOT_ID, written.record_count),)), job=rec.committed())
    assert _gc(sleeper, t, now_ms=NOW).orphans_deleted == []
    assert t.query(keys=[1, 2]).num_rows == 2


def test_the_output_of_a_failed_or_abandoned_job_is_swept(sleeper):
    from statestore.jobs import JobRecord

    t = _table(sleeper)
    store, tid = sleeper.state_store, t.info.table_id
    keys = [_put_orphan(sleeper, new_data_key(tid, ROOT_ID), NOW - 120 * MINUTE) for _ in range(2)]
    failed = JobRecord.created(tid, "failed", "ingest").started(outputs=[keys[0]])
    abandoned = JobRecord.created(tid, "dead", "ingest").started(outputs=[keys[1]])
    store.put_job(failed.failed("boom"))
    store.put_job(abandoned)
    assert _gc(sleeper, t, now_ms=NOW).orphans_deleted == [keys[0]]
    # a day and a bit later the dead job's record has shown no progress for longer than the abandon time
    assert _gc(sleeper, t, now_ms=abandoned.last_update_ms + 1441 * MINUTE).orphans_deleted == [keys[1]]


def test_scratch_of_an_attempt_is_kept_while_its_job_is_in_flight_and_swept_after(sleeper):
    """A bulk import driver killed mid-job leaves sorted runs under the scratch root; they
    stay while the attempt is in flight (its record names an output of the same tag)
    and are swept once it is not (failed, superseded or abandoned)."""
    from sleeper_ops.maintenance.gc import scratch_root
    from statestore.jobs import JobRecord

    t = _table(sleeper)
    store, tid = sleeper.state_store, t.info.table_id
    live = f"{scratch_root(tid)}/bulk-abc-a1-1234/run-0.parquet"
    dead = f"{scratch_root(tid)}/bulk-abc-a0-9999/run-0.parquet"
    for key in (live, dead):
        _put_orphan(sleeper, key, NOW - 120 * MINUTE)
    rec = JobRecord.created(tid, "bulk-abc", "bulk_import").started(
        outputs=[f"{tid}/data/partition_{ROOT_ID}/bulk-abc-a1-1234.parquet"])
    store.put_job(rec)
    assert _gc(sleeper, t, now_ms=NOW).orphans_deleted == [dead]
    assert _exists(sleeper, live) and not _exists(sleeper, dead)
    store.put_job(rec.failed("driver killed"))
    assert _gc(sleeper, t, now_ms=NOW).orphans_deleted == [live]


def test_gc_keeps_files_a_state_within_the_history_retention_references_and_deletes_them_after(sleeper):
    t = _table(sleeper, sleeper_table_gc_delay_minutes="5", sleeper_table_history_retention_minutes="60")
    [old] = _ingest_files(t, 1)
    _unreference(sleeper, t, [old], NOW)  # the states before this commit reference it

    assert _gc(sleeper, t, now_ms=NOW + 64 * MINUTE).deleted == [], "a state 64 minutes old is within 60 + 5"
    assert _exists(sleeper, old)
    report = _gc(sleeper, t, now_ms=NOW + 64 * MINUTE, dry_run=True, explain=True)
    assert "waits out the 5-minute GC delay and 60-minute history retention (the first is due in 1 min 0 s)" \
        in report.summary()
    assert _gc(sleeper, t, now_ms=NOW + 65 * MINUTE + 1).deleted == [old]
    assert not _exists(sleeper, old)


def test_the_orphan_sweep_keeps_files_a_retained_state_references(sleeper):
    t = _table(sleeper, sleeper_table_history_retention_minutes="600")
    [old] = _ingest_files(t, 1)
    _unreference(sleeper, t, [old], NOW)
    _set_mtime(sleeper, old, NOW - 10_000 * MINUTE)
    assert sweep_orphans(sleeper.state_store, sleeper.objects, sleeper.table("t").info, now_ms=NOW) == []
    assert _exists(sleeper, old)
