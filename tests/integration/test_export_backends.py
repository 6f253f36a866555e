"""Bulk export and age-off on a clock (issue 22) on the real backends: PostgreSQL (the
embedded server) with a local destination, and S3 + DynamoDB (moto) with an ``s3://``
destination. The export's files hold exactly the whole-table query's records (deletes
hidden, buffer included); a crashed export reruns to the exact count; GC drops wholly
expired files in one commit."""

from __future__ import annotations

import time
from collections import Counter
from typing import Iterator

import pyarrow as pa
import pytest
import tomli_w

from sleeper_ops import Sleeper
from sleeper_ops.io.export_manifest import read_manifest
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.query import export as export_module
from sleeper_ops.query.export import ExportError, rows_of
from tests.integration.statestore.conftest import moto_with_bucket

pytestmark = pytest.mark.integration

BUCKET = "sleeper-export-data"
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "sortKeyFields": [],
          "valueFields": [{"name": "ts", "type": "LongType"}, {"name": "v", "type": "StringType"}]}
HOUR = 3_600_000
NOW = int(time.time() * 1000)


def _rows(lo: int, hi: int, ts: int, tag: str) -> pa.Table:
    return pa.table({"key": pa.array(range(lo, hi), pa.int64()), "ts": pa.array([ts] * (hi - lo), pa.int64()),
                     "v": [f"{tag}{i}" for i in range(lo, hi)]})


def _records(t: pa.Table) -> Counter:
    return Counter(zip(t["key"].to_pylist(), t["ts"].to_pylist(), t["v"].to_pylist()))


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with moto_with_bucket(BUCKET) as url:
        yield url[len("http://"):]


@pytest.fixture(params=["postgres", "dynamodb"])
def backend(request, tmp_path):  # type: ignore[no-untyped-def]
    """(a Sleeper on the backend, an export destination of its kind)."""
    home = tmp_path / "home"
    home.mkdir()
    if request.param == "postgres":
        raw = {"object_store": {"uri": "data"},
               "state_store": {"backend": "postgres", "dsn": request.getfixturevalue("pg_dsn")}}
        dest = str(tmp_path / "export")
    else:
        moto = request.getfixturevalue("moto")
        prefix = f"t{time.time_ns()}"
        s3 = {"endpoint_override": moto, "scheme": "http", "region": "us-east-1", "access_key": "test",
              "secret_key": "test"}
        raw = {"object_store": {"uri": f"s3://{BUCKET}/{prefix}/data", **s3},
               "state_store": {"backend": "dynamodb", "endpoint_url": f"http://{moto}", "region": "us-east-1",
                               "table_prefix": f"{prefix}-", "access_key": "test", "secret_key": "test"}}
        dest = f"s3://{BUCKET}/{prefix}/export"
    (home / "sleeper.toml").write_text(tomli_w.dumps(raw))
    with Sleeper(home=home) as s:
        yield s, dest


def test_an_export_holds_exactly_the_whole_table_query_on_each_backend(backend) -> None:  # type: ignore[no-untyped-def]
    s, dest = backend
    t = s.create_table("t", SCHEMA, split_points=[100, 200])
    t.ingest(_rows(0, 300, NOW, "a"))
    t.ingest(_rows(150, 250, NOW, "b"))
    t.write(_rows(290, 310, NOW, "w").to_pylist())
    t.delete(ranges=[(40, 60)])
    m = t.export(dest, export_key="2026-11-24").manifest
    expected = t.query(ranges=[(0, None)])
    assert expected.num_rows == 300 + 100 + 20 - 20
    assert _records(rows_of(ObjectStore(dest, s.s3), m)) == _records(expected)
    assert m.rows == 400 and len(m.files) == 3
    assert m.transaction == s.state_store.transaction_number(t.info.table_id)
    again = t.export(dest, export_key="2026-11-24")
    assert not again.written and again.manifest == m
    t.delete(ranges=[(0, 10)])  # the export, made before, still holds those 10 records
    held = [(h.kind, h.rows) for h in t.erasure_report(ranges=[(0, 10)]).held]
    assert ("export file", 10) in held and sum(n for k, n in held if k == "export file") == 10


def test_a_crashed_export_reruns_to_the_exact_records_on_each_backend(backend, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    s, dest = backend
    t = s.create_table("t", SCHEMA, split_points=[100, 200])
    t.ingest(_rows(0, 300, NOW, "a"))
    real, calls = export_module.write_leaf, []

    def crash_on_the_second(runner, store, job):  # type: ignore[no-untyped-def]
        calls.append(job.index)
        if len(calls) == 2:
            raise OSError("killed")
        return real(runner, store, job)

    monkeypatch.setattr(export_module, "write_leaf", crash_on_the_second)
    with pytest.raises(OSError):
        t.export(dest, export_key="k")
    store = ObjectStore(dest, s.s3)
    assert read_manifest(store) is None
    monkeypatch.setattr(export_module, "write_leaf", real)
    m = t.export(dest, export_key="k").manifest
    got = rows_of(store, m)
    assert got.num_rows == 300 and _records(got) == _records(t.query(ranges=[(0, None)]))
    assert sorted(o.key for o in store.list("")) == sorted(["_manifest.json", *(f.key for f in m.files)])


def test_gc_drops_wholly_expired_files_in_one_commit_on_each_backend(backend) -> None:  # type: ignore[no-untyped-def]
    s, _ = backend
    t = s.create_table("t", SCHEMA, split_points=[100])
    t.ingest(_rows(0, 150, NOW - 2 * HOUR, "old"))   # one file shared by both leaves, all expired
    t.ingest(_rows(50, 60, NOW + HOUR, "new"))       # fresh
    s.set_properties("t", {"sleeper.table.iterator.ageoff": f"ts:{HOUR}"})
    assert t.query(ranges=[(0, None)]).num_rows == 10
    commits, commit = [], s.state_store.commit

    def counted(table_id, txn, **kw):  # type: ignore[no-untyped-def]
        commits.append(type(txn).__name__)
        return commit(table_id, txn, **kw)

    s.state_store.commit = counted
    report = t.gc(now_ms=NOW)
    assert len(report.aged_off) == 1 and report.aged_off_records == 150
    assert commits == ["DropFileReferences"]  # one commit drops both its references, nothing rewritten
    assert sorted(r.record_count for r in t.state().references.values()) == [10]
    assert t.query(ranges=[(0, None)]).num_rows == 10


def test_an_export_key_names_one_destination_on_each_backend(backend) -> None:  # type: ignore[no-untyped-def]
    """Issue 33 finding 5: a second destination under one export key is refused; the
    final files carry no attempt id."""
    s, dest = backend
    t = s.create_table("t", SCHEMA, split_points=[100])
    t.ingest(_rows(0, 200, NOW, "a"))
    m = t.export(dest, export_key="daily").manifest
    assert all(".attempt-" not in f.key for f in m.files)
    with pytest.raises(ExportError, match="export key 'daily' of table t was used for another export"):
        t.export(dest + "-2", export_key="daily")
    assert list(ObjectStore(dest + "-2", s.s3).list("")) == []  # no copy nobody sees
    assert not t.export(dest, export_key="daily").written
    assert [(j.status, len(j.outputs)) for j in t.jobs("export")] == [("committed", 1)]
