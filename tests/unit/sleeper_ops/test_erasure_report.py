"""The proof of erasure looks everywhere a copy could be (issue 33): objects under the
table's data prefix the state store does not track (an output kept after an unknown
commit outcome, a losing Spark attempt, a bulk import's scratch run, a sketch sidecar),
crashed exports and exports beyond the newest 1,000 jobs, and the state store's own
records holding a delete's keys, each with when it goes; exit 3 until none holds one."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from statestore.errors import CommitOutcomeUnknownError
from statestore.memory import InMemoryStateStore
from statestore.transactions import ReplaceFileReferences

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}], "sortKeyFields": [],
          "valueFields": [{"name": "v", "type": "StringType"}]}
MINUTE = 60_000


class _LostCompactionReply(InMemoryStateStore):
    """Fails the next compaction commit with an unknown outcome (not applied): the job
    keeps its output for the orphan sweep (DESIGN.md section 10)."""

    fail_next_compaction = False

    def commit(self, table_id, txn, **kw):  # type: ignore[no-untyped-def]
        if isinstance(txn, ReplaceFileReferences) and self.fail_next_compaction:
            self.fail_next_compaction = False
            raise CommitOutcomeUnknownError("connection lost during COMMIT (injected; not applied)")
        return super().commit(table_id, txn, **kw)


@pytest.fixture
def lossy(tmp_path):  # type: ignore[no-untyped-def]
    store = _LostCompactionReply()
    s = Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data")))
    yield s, store
    s.close()


def _table(s: Sleeper):  # type: ignore[no-untyped-def]
    return s.create_table("t", SCHEMA, properties={"sleeper.table.delete.purge.hours": "0",
                                                   "sleeper.table.compaction.strategy": "basic",
                                                   "sleeper.table.compaction.files.batch.size": "2"})


def test_an_output_kept_after_an_unknown_commit_outcome_is_reported_until_the_orphan_sweep_takes_it(lossy) -> None:  # type: ignore[no-untyped-def]
    s, store = lossy
    t = _table(s)
    t.ingest(pa.table({"key": ["alice", "bob"], "v": ["x", "y"]}))
    t.ingest(pa.table({"key": ["carol"], "v": ["z"]}))
    store.fail_next_compaction = True
    assert [r.status for r in t.compact().results] == ["failed"]
    t.delete(keys=["alice"])
    time.sleep(0.01)
    assert [r.status for r in t.compact().results] == ["committed"]
    now = int(time.time() * 1000) + 50 * MINUTE  # past the GC delay and history retention, inside the orphan grace
    t.gc(now_ms=now)
    report = t.erasure_report(keys=["alice"], now_ms=now)
    untracked = [(h.kind, h.rows) for h in report.held if h.kind != "state store record"]
    assert sorted(untracked) == [("sketch sidecar", 1), ("untracked object", 1)], report.render()
    line = next(x for x in report.render().splitlines() if x.startswith("  untracked object: "))
    assert "orphan sweep after the 60-minute grace" in line, line
    far = now + 10 * 24 * 60 * MINUTE  # past the orphan grace, the settle time and the history retention
    t.gc(now_ms=far)
    assert t.erasure_report(keys=["alice"], now_ms=far).clean
    assert sorted(t.query(ranges=[("", None)])["key"].to_pylist()) == ["bob", "carol"]


LONG = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "sortKeyFields": [],
        "valueFields": [{"name": "v", "type": "StringType"}]}
FAR = int(time.time() * 1000) + 10 * 24 * 60 * MINUTE


def _purged(t) -> None:  # type: ignore[no-untyped-def]
    """Compact the deleted rows out and GC everything (files, tombstone, history) far ahead."""
    t.sleeper.set_properties(t.name, {"sleeper.table.delete.purge.hours": "0"})
    t.compact(runner="local")
    t.gc(now_ms=FAR)


def test_a_crashed_export_is_reported_from_its_job_record(sleeper, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sleeper_ops.query.export as export

    t = sleeper.create_table("e", LONG)
    t.ingest(pa.table({"key": pa.array(range(50), pa.int64()), "v": ["x"] * 50}))

    def crash(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError("worker killed before its manifest")

    monkeypatch.setattr(export, "write_manifest", crash)
    with pytest.raises(OSError):
        t.export(str(tmp_path / "out"), export_key="k")
    monkeypatch.undo()
    t.delete(ranges=[(10, 20)])
    _purged(t)
    report = t.erasure_report(ranges=[(10, 20)], now_ms=FAR)
    assert [(h.kind, h.rows) for h in report.held] == [("crashed export file", 10)], report.render()
    assert str(tmp_path / "out") in report.held[0].name
    for p in (tmp_path / "out").iterdir():
        p.unlink()
    assert t.erasure_report(ranges=[(10, 20)], now_ms=FAR).clean


def test_an_export_older_than_the_newest_1000_jobs_is_reported(sleeper, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from statestore.jobs import JobRecord

    t = sleeper.create_table("e", LONG)
    t.ingest(pa.table({"key": pa.array(range(50), pa.int64()), "v": ["x"] * 50}))
    t.export(str(tmp_path / "out"), export_key="k")
    t.delete(ranges=[(10, 20)])
    _purged(t)
    newest = max(j.created_ms for j in sleeper.state_store.list_jobs(t.info.table_id, limit=None))
    for i in range(1001):  # e.g. daily exports that failed, years of them
        sleeper.state_store.put_job(JobRecord(t.info.table_id, f"later-{i}", "export", "failed",
                                              created_ms=newest + 1 + i))
    report = t.erasure_report(ranges=[(10, 20)], now_ms=FAR)
    assert [(h.kind, h.rows) for h in report.held] == [("export file", 10)], report.render()
    assert report.exports_checked == 1


def test_a_losing_attempts_file_is_reported_as_such_until_the_orphan_sweep(sleeper) -> None:  # type: ignore[no-untyped-def]
    from sleeper_ops.io.attempts import attempt_key

    t = sleeper.create_table("e", LONG)
    t.ingest(pa.table({"key": pa.array(range(50), pa.int64()), "v": ["x"] * 50}))
    (name,) = t.state().files
    loser = attempt_key(name, "7")
    sleeper.objects.put(loser, sleeper.objects.get(name))  # a Spark task attempt whose result was not committed
    now = int(time.time() * 1000)
    report = t.erasure_report(keys=[7], now_ms=now)
    assert sorted((h.kind, h.rows) for h in report.held) == [("file", 1), ("losing attempt", 1)], report.render()
    t.gc(now_ms=now + 61 * MINUTE)
    assert [h.kind for h in t.erasure_report(keys=[7], now_ms=now + 61 * MINUTE).held] == ["file"]


def test_a_named_output_of_an_unfinished_job_and_a_scratch_run_are_reported_with_when_they_go(sleeper) -> None:  # type: ignore[no-untyped-def]
    from sleeper_ops.maintenance.gc import scratch_root
    from statestore.jobs import JobRecord

    t = sleeper.create_table("e", LONG)
    tid = t.info.table_id
    rows = pa.table({"key": pa.array(range(20), pa.int64()), "v": ["x"] * 20})
    out = f"{tid}/data/partition_root/bulk-1-a1.parquet"  # named before it is written (DESIGN.md section 10)
    sleeper.state_store.put_job(JobRecord.created(tid, "bulk-1", "bulk_import").started("run", outputs=[out]))
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink)
    sleeper.objects.put(out, sink.getvalue().to_pybytes())
    run = pa.BufferOutputStream()
    with pa.ipc.new_file(run, rows.schema) as w:  # a sorted run of that attempt (Arrow IPC)
        w.write_table(rows)
    sleeper.objects.put(f"{scratch_root(tid)}/bulk-1-a1/0-0-root.arrow", run.getvalue().to_pybytes())
    now = int(time.time() * 1000)
    report = t.erasure_report(keys=[7], now_ms=now)
    got = sorted((h.kind, h.rows) for h in report.held)
    assert got == [("output of an unfinished job", 1), ("scratch run", 1)], report.render()
    assert all("bulk_import job bulk-1" in h.goes for h in report.held)
    sleeper.state_store.put_job(sleeper.state_store.get_job(tid, "bulk-1").failed("killed"))
    report = t.erasure_report(keys=[7], now_ms=now)
    assert sorted((h.kind, h.rows) for h in report.held) == [("scratch run", 1), ("untracked object", 1)]
    t.gc(now_ms=now + 2 * 24 * 60 * MINUTE)  # the orphan sweep takes both
    assert t.erasure_report(keys=[7]).clean
