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
