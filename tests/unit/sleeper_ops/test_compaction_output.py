"""Compaction output: whichever writer merges a job (DataFusion for whole files, the
pyarrow writer otherwise), the file follows the table's Parquet settings and holds
every input row once, in key order, with its sketches beside it."""

from __future__ import annotations

import dataclasses
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.compaction.execute import execute_job
from sleeper_ops.compaction.jobs import create_compaction_jobs
from sleeper_ops.errors import CompactionError
from sleeper_ops.io.arrow_schema import arrow_schema
from sleeper_ops.io.datafile import read_sketches, sketch_key

SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "StringType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "id", "type": "LongType"}],
}
ARROW = pa.schema([("key", pa.string()), ("ts", pa.int64()), ("id", pa.int64())])


def rows(n: int, seed: int, first_id: int) -> pa.Table:
    rnd = random.Random(seed)
    return pa.table({"key": [f"k{rnd.randrange(5000):05d}" for _ in range(n)],
                     "ts": [rnd.randrange(100) for _ in range(n)],
                     "id": list(range(first_id, first_id + n))}, schema=ARROW)


def _table_of_three_files(sleeper, codec: str):
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.parquet.compression.codec": codec,
                                                      "sleeper.table.parquet.rowgroup.rows.max": "300"})
    inputs = [rows(1000, seed=i, first_id=i * 10_000) for i in range(3)]
    for data in inputs:
        t.ingest(data)
    return t, pa.concat_tables(inputs)


@pytest.mark.parametrize("codec", ["zstd", "snappy", "none", "gzip"])
def test_a_whole_file_merge_follows_the_tables_parquet_settings(sleeper, codec):
    t, data = _table_of_three_files(sleeper, codec)
    creation = create_compaction_jobs(sleeper.state_store, t.info)
    (job,) = creation.jobs
    assert job.whole_files
    out = execute_job(job, t.info, sleeper.objects)
    assert out.rows_read == out.rows_written == 3000
    f = pq.ParquetFile(sleeper.objects.path(out.output.key))
    md = f.metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [300] * 10
    expected_codec = {"none": "UNCOMPRESSED"}.get(codec, codec.upper())
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        assert [(c.column_index, c.descending) for c in rg.sorting_columns] == [(0, False), (1, False)]
        for c in range(rg.num_columns):
            col = rg.column(c)
            assert col.compression == expected_codec and not col.has_dictionary_page
            assert col.is_stats_set and col.statistics.has_min_max
            assert col.has_column_index and col.has_offset_index
    assert f.schema_arrow == arrow_schema(t.schema) and b"ARROW:schema" not in (md.metadata or {})
    written = f.read()
    assert sorted(written.column("id").to_pylist()) == sorted(data.column("id").to_pylist()), "every row once"
    keys = list(zip(written.column("key").to_pylist(), written.column("ts").to_pylist()))
    assert keys == sorted(keys), "in key order"
    sketches = read_sketches(sleeper.objects, t.schema, out.output.key)
    assert sketches.fields["key"].count == 3000, "the inputs' sketches merged"


def _attempt_key(t, job) -> str:
    return f"{t.info.table_id}/data/partition_{job.partition_id}/attempt.parquet"


def test_a_whole_file_merge_of_an_unreadable_input_leaves_no_output(sleeper):
    t, _ = _table_of_three_files(sleeper, "zstd")
    (job,) = create_compaction_jobs(sleeper.state_store, t.info).jobs
    sleeper.objects.put(job.inputs[1], b"not parquet")
    key = _attempt_key(t, job)
    with pytest.raises(Exception):
        execute_job(job, t.info, sleeper.objects, output_key=key)
    assert sleeper.objects.head(key) is None and sleeper.objects.head(sketch_key(key)) is None


def test_a_whole_file_merge_reading_other_than_the_references_count_leaves_no_output(sleeper):
    t, _ = _table_of_three_files(sleeper, "zstd")
    (job,) = create_compaction_jobs(sleeper.state_store, t.info).jobs
    assert job.exact_count and job.input_records == 3000
    key = _attempt_key(t, job)
    with pytest.raises(CompactionError, match="read 3000 records, but the inputs' references count 3001"):
        execute_job(dataclasses.replace(job, input_records=3001), t.info, sleeper.objects, output_key=key)
    assert sleeper.objects.head(key) is None and sleeper.objects.head(sketch_key(key)) is None
    assert execute_job(job, t.info, sleeper.objects, output_key=key).rows_written == 3000


# ----- a leaf's share of files it shares, and jobs with deletes ----------------------------
def _layout(md: pq.FileMetaData) -> list[tuple]:
    """Row group sizes and, per column chunk, what the table's Parquet settings decide."""
    return [(md.row_group(i).num_rows, md.row_group(i).sorting_columns,
             [(c.compression, tuple(sorted(c.encodings)), c.has_dictionary_page, c.is_stats_set, c.has_column_index,
               c.has_offset_index) for c in (md.row_group(i).column(j) for j in range(md.num_columns))])
            for i in range(md.num_row_groups)]


def _split_root_at(sleeper, t, key: str):
    from statestore.partitions import split_children
    from statestore.transactions import SplitPartition

    parent, left, right = split_children(t.state().partitions["root"], 0, key, "L", "R")
    sleeper.state_store.commit(t.info.table_id, SplitPartition(parent, left, right))
    return left.region


def _jobs_of_the_left_half(sleeper, t) -> list:
    """The jobs of partition L, once the references are pushed down to both halves."""
    jobs = create_compaction_jobs(sleeper.state_store, t.info).jobs
    return [j for j in jobs or create_compaction_jobs(sleeper.state_store, t.info).jobs if j.partition_id == "L"]


def _identity(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


@pytest.mark.parametrize("codec", ["zstd", "snappy", "none"])
def test_a_leafs_share_of_shared_files_is_merged_on_every_core_as_the_pyarrow_writer_writes_it(sleeper, codec):
    # Given three files referenced from both halves of a split root (the left half's job reads part of each)
    t, data = _table_of_three_files(sleeper, codec)
    region = _split_root_at(sleeper, t, "k02500")
    (job,) = _jobs_of_the_left_half(sleeper, t)
    assert not job.whole_files
    # When DataFusion merges it, and the pyarrow writer merges it (an iterator sends the rows through Python)
    out = execute_job(job, t.info, sleeper.objects, region=region, output_key=_attempt_key(t, job))
    slow = execute_job(job, t.info, sleeper.objects, region=region, iterators=[_identity])
    # Then DataFusion wrote it (on every core), with the same rows, order and layout as the pyarrow writer
    fast_file, slow_file = (pq.ParquetFile(sleeper.objects.path(o.output.key)) for o in (out, slow))
    assert "datafusion" in fast_file.metadata.created_by and "datafusion" not in slow_file.metadata.created_by
    expected = data.filter(pa.compute.less(data.column("key"), "k02500"))
    assert out.rows_read == out.rows_written == expected.num_rows == slow.rows_written
    assert fast_file.read().equals(slow_file.read())
    assert sorted(fast_file.read().column("id").to_pylist()) == sorted(expected.column("id").to_pylist())
    assert _layout(fast_file.metadata) == _layout(slow_file.metadata)
    assert fast_file.schema_arrow == slow_file.schema_arrow == arrow_schema(t.schema)
    # and its sketches are of exactly its own rows, as the pyarrow writer's are
    for o in (out, slow):
        sk = read_sketches(sleeper.objects, t.schema, o.output.key).fields["key"]
        assert (sk.count, sk.min(), sk.max()) == (expected.num_rows, min(expected.column("key").to_pylist()),
                                                  max(expected.column("key").to_pylist()))


def test_a_merge_with_deletes_is_merged_on_every_core_and_sketches_only_the_rows_kept(sleeper):
    t, data = _table_of_three_files(sleeper, "zstd")
    t.delete(ranges=[("k01000", "k02000")])
    (job,) = create_compaction_jobs(sleeper.state_store, t.info).jobs
    assert job.whole_files and job.tombstones
    out = execute_job(job, t.info, sleeper.objects)
    f = pq.ParquetFile(sleeper.objects.path(out.output.key))
    assert "datafusion" in f.metadata.created_by
    keys = data.column("key").to_pylist()
    kept = [k for k in keys if not "k01000" <= k < "k02000"]
    assert out.rows_written == len(kept) == f.metadata.num_rows and sorted(f.read().column("key").to_pylist()) == \
        sorted(kept)
    assert read_sketches(sleeper.objects, t.schema, out.output.key).fields["key"].count == len(kept)


def test_a_failed_merge_of_a_leafs_share_leaves_no_output(sleeper):
    t, _ = _table_of_three_files(sleeper, "zstd")
    region = _split_root_at(sleeper, t, "k02500")
    (job,) = _jobs_of_the_left_half(sleeper, t)
    sleeper.objects.put(job.inputs[1], b"not parquet")
    key = _attempt_key(t, job)
    with pytest.raises(Exception):
        execute_job(job, t.info, sleeper.objects, region=region, output_key=key)
    assert sleeper.objects.head(key) is None and sleeper.objects.head(sketch_key(key)) is None


def test_a_failure_building_the_sketches_of_a_leafs_share_leaves_no_output(sleeper, monkeypatch):
    from sleeper_ops.io.sketches import RowKeySketches

    t, _ = _table_of_three_files(sleeper, "zstd")
    region = _split_root_at(sleeper, t, "k02500")
    (job,) = _jobs_of_the_left_half(sleeper, t)

    def failing(self, batch):
        raise MemoryError("no room for the sketch")
    monkeypatch.setattr(RowKeySketches, "update", failing)
    key = _attempt_key(t, job)
    with pytest.raises(MemoryError, match="no room for the sketch"):
        execute_job(job, t.info, sleeper.objects, region=region, output_key=key)
    assert sleeper.objects.head(key) is None and sleeper.objects.head(sketch_key(key)) is None


def test_sketches_that_miss_rows_of_a_leafs_share_fail_the_job_and_leave_no_output(sleeper, monkeypatch):
    from sleeper_ops.io.sketches import RowKeySketches

    t, _ = _table_of_three_files(sleeper, "zstd")
    region = _split_root_at(sleeper, t, "k02500")
    (job,) = _jobs_of_the_left_half(sleeper, t)
    update = RowKeySketches.update
    batches = []

    def every_other(self, batch):
        batches.append(batch.num_rows)
        if len(batches) % 2:
            update(self, batch)
    monkeypatch.setattr(RowKeySketches, "update", every_other)
    key = _attempt_key(t, job)
    with pytest.raises(CompactionError, match=r"the sketches of .* count \{'key': \d+\} rows, but the file holds"):
        execute_job(job, t.info, sleeper.objects, region=region, output_key=key, batch_size=256)
    assert len(batches) > 1
    assert sleeper.objects.head(key) is None and sleeper.objects.head(sketch_key(key)) is None
