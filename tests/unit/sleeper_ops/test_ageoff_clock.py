"""Age-off on a clock (issue 22) on the in-memory store, with an injected clock: GC
drops the references of files whose records have all expired (Parquet statistics, one
commit, no rewrite) and deletes them after the GC delay; files only partly expired
get compaction jobs once more than ``sleeper.table.ageoff.rewrite.fraction`` of their
records expired; reads answer the same throughout."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from sleeper_ops.compaction.jobs import create_compaction_jobs
from sleeper_ops.engine.ageoff_expiry import file_expiry
from sleeper_ops.engine.iterators import AgeOff

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "sortKeyFields": [],
          "valueFields": [{"name": "ts", "type": "LongType"}]}
HOUR = 3_600_000
NOW = int(time.time() * 1000)  # the injected clock; reads use the real one, within seconds of it
OLD, FRESH = NOW - 2 * HOUR, NOW + 24 * HOUR


def _rows(keys: range, ts: list[int]) -> pa.Table:
    return pa.table({"key": pa.array(keys, pa.int64()), "ts": pa.array(ts, pa.int64())})


@pytest.fixture
def t(sleeper):  # type: ignore[no-untyped-def]
    t = sleeper.create_table("t", SCHEMA, split_points=[100])
    t.ingest(_rows(range(50), [OLD] * 50))                      # A: all expired
    t.ingest(_rows(range(50, 100), [OLD] * 40 + [FRESH] * 10))     # B: 80 % expired
    t.ingest(_rows(range(100, 200), [FRESH] * 100))                # C: fresh
    t.ingest(_rows(range(150, 160), [OLD] * 10))                   # D: all expired
    sleeper.set_properties("t", {"sleeper.table.iterator.ageoff": f"ts:{HOUR}"})
    return t


def _files(t) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Referenced file -> its records."""
    return {r.filename: r.record_count for r in t.state().references.values()}


def _visible(t) -> int:  # type: ignore[no-untyped-def]
    return t.query(ranges=[(0, None)]).num_rows


def test_gc_drops_wholly_expired_files_by_reference_in_one_commit_and_deletes_them_after_the_delay(t) -> None:  # type: ignore[no-untyped-def]
    before = _files(t)
    assert sorted(before.values()) == [10, 50, 50, 100] and _visible(t) == 110
    early = t.gc(now_ms=OLD + HOUR // 2)  # nothing had expired yet on that clock
    assert early.aged_off == [] and _files(t) == before
    expired = sorted(f for f, n in before.items() if n in (10,) or (n == 50 and file_expiry(
        t.sleeper.objects, f, AgeOff("ts", HOUR), NOW - HOUR).whole))
    assert len(expired) == 2
    dry = t.gc(now_ms=NOW, dry_run=True)
    assert dry.aged_off == expired and _files(t) == before
    txn = t.sleeper.state_store.transaction_number(t.info.table_id)
    report = t.gc(now_ms=NOW)
    assert report.aged_off == expired and report.aged_off_records == 60 and report.deleted == []
    assert "dropped 2 files whose 60 records had all aged off" in report.summary()
    assert t.sleeper.state_store.transaction_number(t.info.table_id) == txn + 1  # one commit
    assert sorted(_files(t).values()) == [50, 100]  # B and C, not rewritten
    assert _visible(t) == 110
    assert t.gc(now_ms=NOW + 44 * 60_000).deleted == [], "a state within the history retention reads them"
    later = t.gc(now_ms=NOW + 46 * 60_000)  # past the 15-minute GC delay and the 30-minute history retention
    assert sorted(later.deleted) == expired and later.aged_off == []
    assert all(t.sleeper.objects.head(f) is None for f in expired) and _visible(t) == 110


def test_a_partly_expired_file_gets_a_compaction_job_once_past_the_rewrite_fraction(t) -> None:  # type: ignore[no-untyped-def]
    t.gc(now_ms=NOW)
    s = t.sleeper
    s.set_properties("t", {"sleeper.table.ageoff.rewrite.fraction": "0.9"})
    assert create_compaction_jobs(s.state_store, s.state_store.get_table("t"), now=NOW, objects=s.objects).jobs == []
    s.set_properties("t", {"sleeper.table.ageoff.rewrite.fraction": "0.75"})
    jobs = create_compaction_jobs(s.state_store, s.state_store.get_table("t"), now=NOW, objects=s.objects).jobs
    b = next(f for f, n in _files(t).items() if n == 50)
    assert [j.inputs for j in jobs] == [(b,)]
    t.compact(retry_after_minutes=0)
    assert sorted(_files(t).values()) == [10, 100] and _visible(t) == 110


def test_without_the_age_off_iterator_gc_drops_nothing(sleeper) -> None:  # type: ignore[no-untyped-def]
    t = sleeper.create_table("plain", SCHEMA)
    t.ingest(_rows(range(10), [OLD] * 10))
    assert t.gc(now_ms=NOW).aged_off == [] and len(_files(t)) == 1
