"""Bulk export (issue 22) on the in-memory store: one sorted file per leaf whose union is
the whole-table query (deletes hidden, iterators applied, the buffer and ancestor
files included), a manifest naming the transaction read at, idempotent per export key,
a crash mid-way rerun to exactly the right rows, and one-line refusals."""

from __future__ import annotations

import json
import re
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.io.export_manifest import MANIFEST, read_manifest
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.query import export as export_module
from sleeper_ops.query.export import ExportError, rows_of

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "sortKeyFields": [],
          "valueFields": [{"name": "v", "type": "StringType"}, {"name": "n", "type": "LongType"}]}


def _rows(lo: int, hi: int, tag: str = "a") -> pa.Table:
    return pa.table({"key": pa.array(range(lo, hi), pa.int64()), "v": [f"{tag}{i % 3}" for i in range(lo, hi)],
                     "n": pa.array([i % 7 for i in range(lo, hi)], pa.int64())})


def _records(table: pa.Table) -> Counter:
    return Counter(zip(*(table.column(c).to_pylist() for c in ("key", "v", "n"))))


@pytest.fixture
def t(sleeper):  # type: ignore[no-untyped-def]
    t = sleeper.create_table("t", SCHEMA, split_points=[100, 200, 300])
    t.ingest(_rows(0, 400))          # files in the four leaves
    t.ingest(_rows(50, 60, "b"))     # a second file in a leaf
    t.write(_rows(390, 420, "w").to_pylist())  # buffered records
    t.delete(ranges=[(120, 140)], where="n = 0")
    return t


def test_an_export_is_one_sorted_file_per_leaf_whose_union_is_the_whole_table_query(t, tmp_path) -> None:  # type: ignore[no-untyped-def]
    dest = tmp_path / "out"
    result = t.export(str(dest), export_key="k1")
    m = result.manifest
    assert result.written and len(m.files) == 4
    expected = t.query(ranges=[(0, None)])
    assert expected.num_rows == 400 + 10 + 30 - 2  # duplicates kept; 126 and 133 deleted (n = 0 in [120, 140))
    exported = rows_of(ObjectStore(str(dest)), m)
    assert _records(exported) == _records(expected)
    assert m.rows == expected.num_rows == sum(f.rows for f in m.files)
    for f in m.files:
        keys = pq.read_table(dest / f.key)["key"].to_pylist()
        assert keys == sorted(keys) and len(keys) == f.rows
    on_disk = json.loads((dest / MANIFEST).read_text())
    assert on_disk["table"] == "t" and on_disk["export_key"] == "k1" and on_disk["rows"] == expected.num_rows
    assert on_disk["transaction"] == t.sleeper.state_store.transaction_number(t.info.table_id)
    assert sorted(p.name for p in dest.iterdir()) == sorted([MANIFEST, *(f.key for f in m.files)])


def test_a_range_and_a_where_export_only_matching_records(t, tmp_path) -> None:  # type: ignore[no-untyped-def]
    m = t.export(str(tmp_path / "out"), range=(90, 210), where="v LIKE 'a%' AND n > 3").manifest
    got = rows_of(ObjectStore(str(tmp_path / "out")), m)
    expected = [r for r in _records(t.query(ranges=[(90, 210)])).elements() if r[1].startswith("a") and r[2] > 3]
    assert _records(got) == Counter(expected) and len(m.files) == 3


def test_iterators_apply_to_the_export(t, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t.sleeper.set_properties("t", {"sleeper.table.iterator.aggregation": "max(v),sum(n)"})
    m = t.export(str(tmp_path / "out")).manifest
    got = rows_of(ObjectStore(str(tmp_path / "out")), m)
    assert got.num_rows == len(set(got["key"].to_pylist()))  # one row a key
    assert _records(got) == _records(t.query(ranges=[(0, None)]))


def test_a_repeated_export_key_answers_already_exported_and_writes_nothing(t, tmp_path) -> None:  # type: ignore[no-untyped-def]
    dest = tmp_path / "out"
    first = t.export(str(dest), export_key="daily-1")
    before = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    t.ingest(_rows(1000, 1010))
    again = t.export(str(dest), export_key="daily-1")
    assert not again.written and again.manifest == first.manifest
    assert "already exported" in again.summary()
    assert {p.name: p.stat().st_mtime_ns for p in dest.iterdir()} == before


def test_a_destination_holding_another_export_is_refused_in_one_line(t, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t.export(str(tmp_path / "out"), export_key="a")
    with pytest.raises(ExportError) as e:
        t.export(str(tmp_path / "out"), export_key="b")
    assert "already holds export 'a'" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("lo", "hi"), [(200, 200), (300, 100)])
def test_an_empty_or_inverted_range_is_refused_in_one_line(t, tmp_path, lo, hi) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ExportError, match="empty") as e:
        t.export(str(tmp_path / "out"), range=(lo, hi))
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()


def test_an_unknown_field_in_where_is_refused_in_one_line(t, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ExportError, match="nosuch") as e:
        t.export(str(tmp_path / "out"), where="nosuch = 1")
    assert "\n" not in str(e.value)


def test_an_export_that_crashed_midway_reruns_to_exactly_the_right_rows(t, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    dest = tmp_path / "out"
    real = export_module.write_leaf
    written: list[str] = []

    def crash_after_two(runner, store, job):  # type: ignore[no-untyped-def]
        if len(written) == 2:
            raise OSError("the process died")
        f = real(runner, store, job)
        written.append(f.key)
        return f

    monkeypatch.setattr(export_module, "write_leaf", crash_after_two)
    with pytest.raises(OSError):
        t.export(str(dest), export_key="k")
    assert read_manifest(ObjectStore(str(dest))) is None and len(list(dest.iterdir())) == 2
    assert t.jobs("export")[0].status == "failed"
    monkeypatch.setattr(export_module, "write_leaf", real)
    m = t.export(str(dest), export_key="k").manifest
    got = rows_of(ObjectStore(str(dest)), m)
    expected = t.query(ranges=[(0, None)])
    assert got.num_rows == expected.num_rows == 438
    assert _records(got) == _records(expected)
    assert sorted(p.name for p in dest.iterdir()) == sorted([MANIFEST, *(f.key for f in m.files)])
    assert [j.status for j in t.jobs("export")] == ["committed"]


def test_a_manifest_cut_short_counts_as_no_export(t, tmp_path) -> None:  # type: ignore[no-untyped-def]
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / MANIFEST).write_text('{"table": "t", "export_ke')
    m = t.export(str(dest), export_key="k").manifest
    assert read_manifest(ObjectStore(str(dest))) == m


def test_the_erasure_report_lists_exports_made_before_a_delete_until_their_owner_removes_them(
        sleeper, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil
    t = sleeper.create_table("e", SCHEMA, split_points=[100])
    t.ingest(_rows(0, 200))
    before = t.export(str(tmp_path / "before"), export_key="before").manifest
    t.delete(ranges=[(120, 130)])
    t.export(str(tmp_path / "after"), export_key="after")  # made after the delete: holds none of them
    t.sleeper.set_properties("e", {"sleeper.table.delete.purge.hours": "0"})
    t.compact()
    t.gc(now_ms=4_000_000_000_000)
    report = t.erasure_report(ranges=[(120, 130)])
    held = [(h.kind, h.name, h.rows) for h in report.held]
    leaf = next(f for f in before.files if f.leaf != before.files[0].leaf)  # the leaf [100, None)
    assert held == [("export file", str(tmp_path / "before" / leaf.key), 10)]
    assert report.exports_checked == 2 and "a copy outside the table: remove it" in report.render()
    shutil.rmtree(tmp_path / "before")
    assert t.erasure_report(ranges=[(120, 130)]).clean


def test_an_export_killed_without_a_record_of_its_end_does_not_keep_spent_tombstones(sleeper) -> None:  # type: ignore[no-untyped-def]
    from statestore.jobs import JobRecord

    t = sleeper.create_table("k", SCHEMA)
    t.ingest(_rows(0, 20))
    killed = JobRecord(t.info.table_id, "export-killed", "export", created_ms=1).started("a killed run")
    sleeper.state_store.put_job(killed)  # started before the delete, never ended: the process was killed
    t.delete(ranges=[(0, 5)])
    sleeper.set_properties("k", {"sleeper.table.delete.purge.hours": "0"})
    t.compact()
    assert t.gc(now_ms=4_000_000_000_000).tombstones_dropped == [1]


# ----- export keys name one destination (issue 33 finding 5; Deliver item 6) -----------------
def test_an_export_key_reused_for_another_destination_or_request_is_refused_in_one_line(t, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t.export(str(tmp_path / "exp1"), export_key="daily")
    for dest, kwargs in ((tmp_path / "exp2", {}), (tmp_path / "exp1", {"where": "n = 1"}),
                         (tmp_path / "exp1", {"range": (0, 100)})):
        with pytest.raises(ExportError, match="export key 'daily' of table t was used for another export") as e:
            t.export(str(dest), export_key="daily", **kwargs)
        assert "\n" not in str(e.value)
    assert not (tmp_path / "exp2").exists() or not list((tmp_path / "exp2").iterdir())  # no copy nobody sees
    assert [(j.status, j.outputs) for j in t.jobs("export")] == [("committed", (str(tmp_path / "exp1" / MANIFEST),))]
    again = t.export(str(tmp_path / "exp1"), export_key="daily")  # the same request answers the first
    assert not again.written


def test_final_export_files_carry_no_attempt_id(t, tmp_path) -> None:  # type: ignore[no-untyped-def]
    m = t.export(str(tmp_path / "out")).manifest
    assert m.files and all(re.fullmatch(r"part-\d{5}-[0-9a-z-]+\.parquet", f.key) for f in m.files), \
        [f.key for f in m.files]


def test_concurrent_exports_of_two_tables_to_one_destination_are_refused(t, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from statestore.errors import LeaseHeldError

    u = t.sleeper.create_table("u", SCHEMA)
    u.ingest(_rows(0, 10))
    dest = tmp_path / "shared"
    real = export_module.write_leaf
    tried: list[bool] = []
    refused: list[str] = []

    def meanwhile(runner, store, job):  # type: ignore[no-untyped-def]
        if not tried:  # table u exports to the same destination while t's export writes
            tried.append(True)
            try:
                u.export(str(dest))
            except LeaseHeldError as e:
                refused.append(str(e))
        return real(runner, store, job)

    monkeypatch.setattr(export_module, "write_leaf", meanwhile)
    m = t.export(str(dest)).manifest
    assert refused and "\n" not in refused[0]
    assert sorted(p.name for p in dest.iterdir()) == sorted([MANIFEST, *(f.key for f in m.files)])
    assert rows_of(ObjectStore(str(dest)), m).num_rows == t.query(ranges=[(0, None)]).num_rows == 438


def test_leftovers_deleted_are_only_part_files_an_export_of_the_table_names(t, tmp_path) -> None:  # type: ignore[no-untyped-def]
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "part-00000-0f1e-c000.snappy.parquet").write_bytes(b"another tool's file")
    leaf = sorted(p.id for p in t.state().partitions.values() if p.is_leaf)[0]
    (dest / f"part-00009-{leaf}.attempt-77.parquet").write_bytes(b"a killed attempt's")
    (dest / f"part-00009-{leaf}.parquet").write_bytes(b"a killed run's")
    m = t.export(str(dest)).manifest
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        [MANIFEST, "part-00000-0f1e-c000.snappy.parquet", *(f.key for f in m.files)])
