"""Parquet inputs that fit one chunk are read key columns first (sleeper_ops.ingest.key_first):
the same rows, order and refusals as the streaming read, checked against a model sort."""

from __future__ import annotations

import bisect
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.errors import IngestError
from sleeper_ops.ingest.key_first import ParquetChunk
from sleeper_ops.io.storage import ObjectStore
from statestore.memory import InMemoryStateStore
from statestore.schema import Schema

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "sortKeyFields": [{"name": "ts", "type": "LongType"}],
          "valueFields": [{"name": "v", "type": "StringType"}, {"name": "n", "type": "IntType"}]}
POINTS = ["g", "n", "t"]


@pytest.fixture
def sleeper(tmp_path: Path) -> Sleeper:
    return Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))


def _inputs(tmp_path: Path, files: int, rows: int, seed: int) -> tuple[list[str], list[dict]]:
    """``files`` Parquet files of several row groups each, with keys repeated within and
    across files (ties settled by the sort key, then the input position), dictionary
    encoded values and a narrower integer type than the schema's."""
    rng = random.Random(seed)
    paths, every = [], []
    for f in range(files):
        recs = [{"key": rng.choice("abcdefghijklmnopqrstuvwxyz") * rng.randint(1, 3), "ts": rng.randint(0, 3),
                 "v": f"file{f}-row{i}", "n": i} for i in range(rows)]
        table = pa.table({"key": [r["key"] for r in recs], "ts": pa.array([r["ts"] for r in recs], pa.int64()),
                          "v": pa.array([r["v"] for r in recs]).dictionary_encode(),
                          "n": pa.array([r["n"] for r in recs], pa.int16())})
        path = tmp_path / f"in-{f}.parquet"
        pq.write_table(table, path, row_group_size=max(1, rows // 3))
        paths.append(str(path))
        every += recs
    return paths, every


def test_parquet_inputs_of_one_chunk_land_in_their_leaves_in_the_model_order(sleeper: Sleeper,
                                                                            tmp_path: Path) -> None:
    t = sleeper.create_table("k", SCHEMA, split_points=POINTS)
    paths, every = _inputs(tmp_path, files=3, rows=700, seed=5)

    result = t.ingest(paths)

    assert result.records == 2100 and result.spilled_chunks == 0
    # the model: a stable sort on (key, ts) of the files' rows in the order given
    model = sorted(every, key=lambda r: (r["key"], r["ts"]))
    got = t.query(ranges=[("", None)])
    assert got.num_rows == 2100
    assert got.to_pylist() == model, "rows, their values and their order are the model's"
    counts: dict[int, int] = {}
    for r in every:
        leaf = bisect.bisect_right(POINTS, r["key"])
        counts[leaf] = counts.get(leaf, 0) + 1
    leaves = sorted((p for p in t.state().partitions.values() if p.is_leaf), key=lambda p: p.region.ranges[0].min)
    per_leaf = {p.id: 0 for p in leaves}
    for ref in t.state().references.values():
        per_leaf[ref.partition_id] += ref.record_count
    assert [per_leaf[p.id] for p in leaves] == [counts.get(i, 0) for i in range(4)]


def test_the_sort_is_given_only_the_key_columns_and_the_table_has_the_schemas_columns(tmp_path: Path) -> None:
    paths, every = _inputs(tmp_path, files=2, rows=50, seed=9)
    schema = Schema.from_dict(SCHEMA)
    chunk = ParquetChunk.of(paths, schema, None, max_rows=100, max_bytes=1 << 30)
    assert chunk is not None and chunk.rows == 100
    seen: list[list[str]] = []

    table, answer = chunk.read(schema, None, lambda keys: seen.append(keys.column_names) or "sorted")

    assert seen == [["key", "ts"]] and answer == "sorted"
    assert table.column_names == ["key", "ts", "v", "n"]
    assert table.schema.field("n").type == pa.int32() and table.schema.field("v").type == pa.string()
    assert table.to_pylist() == every, "files in the order given, each file's rows in its own order"


@pytest.mark.parametrize("limits,why", [({"max_rows": 99, "max_bytes": 1 << 30}, "rows"),
                                        ({"max_rows": 100, "max_bytes": 1_000}, "bytes")])
def test_inputs_over_the_chunk_are_left_to_the_streaming_read(tmp_path: Path, limits: dict, why: str) -> None:
    paths, _ = _inputs(tmp_path, files=2, rows=50, seed=9)
    assert ParquetChunk.of(paths, Schema.from_dict(SCHEMA), None, **limits) is None, why


def test_a_mix_with_a_text_file_is_left_to_the_streaming_read(tmp_path: Path) -> None:
    paths, _ = _inputs(tmp_path, files=1, rows=10, seed=9)
    (tmp_path / "more.csv").write_text("key,ts,v,n\na,1,x,2\n")
    assert ParquetChunk.of([*paths, str(tmp_path / "more.csv")], Schema.from_dict(SCHEMA), None,
                           max_rows=100, max_bytes=1 << 30) is None


def test_over_the_chunk_the_ingest_spills_and_lands_the_same_rows(sleeper: Sleeper, tmp_path: Path) -> None:
    t = sleeper.create_table("k", SCHEMA, split_points=POINTS)
    paths, every = _inputs(tmp_path, files=3, rows=700, seed=5)

    result = t.ingest(paths, max_chunk_rows=1000)

    assert result.spilled_chunks == 3 and result.records == 2100
    got = t.query(ranges=[("", None)]).to_pylist()
    # merged runs order rows by row key and sort key; rows equal in both come in any order
    assert [(r["key"], r["ts"]) for r in got] == sorted((r["key"], r["ts"]) for r in every)
    assert sorted(got, key=lambda r: r["v"]) == sorted(every, key=lambda r: r["v"])


def test_a_bad_second_file_is_refused_from_its_footer_before_any_file_is_read(sleeper: Sleeper,
                                                                            tmp_path: Path) -> None:
    t = sleeper.create_table("k", SCHEMA, split_points=POINTS)
    paths, _ = _inputs(tmp_path, files=1, rows=10, seed=9)
    pq.write_table(pa.table({"key": ["a"], "ts": [1], "v": ["x"], "n": [1], "extra": [1]}), tmp_path / "bad.parquet")

    with pytest.raises(IngestError, match=r"bad\.parquet: column 'extra' is not in the table schema"):
        t.ingest([*paths, str(tmp_path / "bad.parquet")])

    assert t.state().references == {}
    assert not list((tmp_path / "data").rglob("*.parquet")), "nothing written"


def test_a_footer_refusal_fails_the_batchers_job_record_naming_the_column(sleeper: Sleeper, tmp_path: Path) -> None:
    from sleeper_ops.ingest.standard import IngestRunner
    from statestore.jobs import JobRecord

    t = sleeper.create_table("k", SCHEMA, split_points=POINTS)
    job = JobRecord.created(t.info.table_id, "batch-1", "ingest").started("run-1")
    sleeper.state_store.put_job(job)
    pq.write_table(pa.table({"key": ["a"], "ts": [1], "v": ["x"]}), tmp_path / "short.parquet")

    with pytest.raises(IngestError, match="column 'n' of the table schema is missing"):
        runner = IngestRunner(sleeper.state_store, sleeper.objects, t.info, job=job)
        runner.ingest_files([str(tmp_path / "short.parquet")])

    record = sleeper.state_store.get_job(t.info.table_id, "batch-1")
    assert record is not None and record.status == "failed" and "'n'" in (record.reason or "")
    assert t.state().references == {}


def _repetitive(tmp_path: Path, rows: int) -> tuple[str, int]:
    """A Parquet file whose value column is two long strings repeated: a few KB of pages
    (dictionary encoded) that decode to about 1 KB a row; and its footer's bytes."""
    table = pa.table({"key": [f"k{i:06d}" for i in range(rows)], "ts": pa.array([1] * rows, pa.int64()),
                      "v": ["x" * 1000 if i % 2 else "y" * 1000 for i in range(rows)],
                      "n": pa.array(range(rows), pa.int32())})
    path = tmp_path / "repetitive.parquet"
    pq.write_table(table, path, row_group_size=500)  # read as batches of 500 rows (0.5 MB) when streamed
    md = pq.ParquetFile(path).metadata
    return str(path), sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))


def test_columns_that_decode_past_the_chunk_are_left_to_the_streaming_read(tmp_path: Path) -> None:
    path, footer_bytes = _repetitive(tmp_path, 5_000)
    schema = Schema.from_dict(SCHEMA)
    chunk = ParquetChunk.of([path], schema, None, max_rows=10_000, max_bytes=1 << 20)
    assert footer_bytes < 1 << 20 and chunk is not None, "the footer says the file fits the chunk"

    assert chunk.read(schema, None, lambda keys: None) is None, "5 MB decoded is over the 1 MB chunk"


def test_an_ingest_of_such_a_file_spills_and_lands_every_record_once(sleeper: Sleeper, tmp_path: Path) -> None:
    path, _ = _repetitive(tmp_path, 5_000)
    t = sleeper.create_table("k", SCHEMA, split_points=POINTS)

    result = t.ingest([path], max_chunk_bytes=1 << 20)

    assert result.spilled_chunks >= 5 and result.records == 5_000
    got = t.query(ranges=[("", None)])
    assert got.num_rows == 5_000 and sorted(got.column("n").to_pylist()) == list(range(5_000))


def test_a_row_group_larger_than_a_batch_is_read_and_budgeted_a_batch_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sleeper_ops.ingest import key_first

    path, _ = _repetitive(tmp_path, 5_000)
    pq.write_table(pq.read_table(path), path, row_group_size=5_000)  # one row group of 5 MB decoded
    monkeypatch.setattr(key_first, "BATCH_ROWS", 1_000)
    spent: list[int] = []
    spend = key_first._Budget.spend
    monkeypatch.setattr(key_first._Budget, "spend", lambda self, n: (spent.append(n), spend(self, n))[1])
    schema = Schema.from_dict(SCHEMA)
    chunk = ParquetChunk.of([path], schema, None, max_rows=10_000, max_bytes=1 << 20)

    assert chunk is not None and chunk.read(schema, None, lambda keys: None) is None
    assert spent and max(spent) < 1_100_000, "no piece read was larger than a batch of 1,000 rows (~1 MB)"
