"""The streaming merge of sorted files: order, region filter, plan shape, read-ahead thread."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sleeper_ops.engine import merge
from sleeper_ops.engine.merge import merge_sorted
from statestore.region import Range, Region
from statestore.schema import Schema

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}],
                           "sortKeyFields": [{"name": "ts", "type": "LongType"}],
                           "valueFields": [{"name": "value", "type": "StringType"}]})


def sorted_file(path, seed: int, n: int = 300) -> pa.Table:
    """A sorted file whose keys repeat (so sort-key order within a key matters)."""
    keys = [f"k{(i * 7919 + seed) % 97:03d}" for i in range(n)]
    t = pa.table({"key": pa.array(keys, pa.string()),
                  "ts": pa.array([(i * 31 + seed) % 1000 for i in range(n)], pa.int64()),
                  "value": pa.array([f"v{seed}-{i}" for i in range(n)], pa.string())})
    t = t.sort_by([("key", "ascending"), ("ts", "ascending")])
    pq.write_table(t, path, row_group_size=50)
    return t


@pytest.fixture
def inputs(tmp_path):
    tables, paths = [], []
    for i in range(4):
        p = str(tmp_path / f"in-{i}.parquet")
        tables.append(sorted_file(p, seed=i))
        paths.append(p)
    return paths, pa.concat_tables(tables)


def expected(all_rows: pa.Table) -> list[dict]:
    return all_rows.sort_by([("key", "ascending"), ("ts", "ascending")]).select(["key", "ts"]).to_pylist()


def merged(batches) -> list[dict]:
    return pa.Table.from_batches(list(batches)).select(["key", "ts"]).to_pylist()


@pytest.mark.parametrize("read_ahead", [0, 1, 4])
def test_merge_yields_every_row_in_key_then_sort_key_order(inputs, read_ahead):
    paths, all_rows = inputs
    batches = list(merge_sorted(paths, SCHEMA, batch_size=64, read_ahead=read_ahead))
    assert all(b.num_rows <= 64 for b in batches)
    out = merged(batches)
    assert out == expected(all_rows)
    assert pa.Table.from_batches(batches).column("value").null_count == 0


def test_region_filter_keeps_only_the_partition_rows(inputs):
    paths, all_rows = inputs
    region = Region((Range("key", "k020", "k050"),))
    out = merged(merge_sorted(paths, SCHEMA, region=region, batch_size=50))
    keep = pc.and_(pc.greater_equal(all_rows.column("key"), "k020"), pc.less(all_rows.column("key"), "k050"))
    assert out == expected(all_rows.filter(keep))
    assert out


def test_plan_is_a_streaming_merge_with_no_sort_and_no_repartition(inputs):
    paths, _ = inputs
    assert "SortPreservingMergeExec" in merge.explain_merge(paths, SCHEMA)
    ctx = merge._session(len(paths), 1024)
    frame = merge._merged_frame(ctx, paths, SCHEMA, Region((Range("key", "k020", "k050"),)))
    plan = str(frame.execution_plan().display_indent())
    assert "SortPreservingMergeExec" in plan
    assert "SortExec" not in plan.replace("SortPreservingMergeExec", "")
    assert "RepartitionExec" not in plan


def test_a_merge_error_is_raised_to_the_consumer(tmp_path, inputs):
    paths, _ = inputs
    bad = tmp_path / "corrupt.parquet"
    bad.write_bytes(b"PAR1" + b"\0" * 100 + b"PAR1")
    with pytest.raises(Exception):
        list(merge_sorted([*paths, str(bad)], SCHEMA, read_ahead=2))
    assert not _read_ahead_threads()


def test_closing_the_merge_early_stops_its_thread(inputs):
    paths, _ = inputs
    it = merge_sorted(paths, SCHEMA, batch_size=16, read_ahead=2)
    first = next(it)
    assert first.num_rows == 16
    assert _read_ahead_threads()
    it.close()
    assert not _read_ahead_threads()


def _read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "merge-read-ahead" and t.is_alive()]


# ----- merged into a file by DataFusion, the row keys seen as they are written ----------------
def _options():
    from sleeper_ops.io.datafile import ParquetSettings, datafusion_writer_options

    return datafusion_writer_options(ParquetSettings(row_group_rows=50), SCHEMA)


def test_a_merge_into_a_file_shows_on_keys_exactly_the_keys_written_in_order(tmp_path, inputs):
    paths, all_rows = inputs
    region = Region((Range("key", "k010", "k050"),))
    seen: list[pa.RecordBatch] = []
    threads: set[str] = set()

    def on_keys(batch: pa.RecordBatch) -> None:
        threads.add(threading.current_thread().name)
        seen.append(batch)
    out = str(tmp_path / "out.parquet")
    merge.merge_sorted_to_file(paths, SCHEMA, out, _options(), region=region, on_keys=on_keys, batch_size=64)
    written = pq.read_table(out)
    assert pa.Table.from_batches(seen).column("key").to_pylist() == written.column("key").to_pylist()
    assert [b.schema.names for b in seen] == [["key"]] * len(seen) and all(b.num_rows <= 64 for b in seen)
    assert written.select(["key", "ts"]).to_pylist() == [
        r for r in expected(all_rows) if "k010" <= r["key"] < "k050"], "the region's rows, in key order"
    assert threads == {"merge-key-tee"}, "on_keys runs on the tee's own thread"
    md = pq.ParquetFile(out).metadata
    assert [(c.column_index, c.descending) for c in md.row_group(0).sorting_columns] == [(0, False), (1, False)], \
        "the observing filter keeps the sort order DataFusion declares in the footer"


def test_an_error_in_on_keys_is_raised_by_the_merge_into_a_file(tmp_path, inputs):
    paths, _ = inputs
    calls = []

    def on_keys(batch: pa.RecordBatch) -> None:
        calls.append(batch.num_rows)
        raise ValueError("sketch failed")
    with pytest.raises(ValueError, match="sketch failed"):
        merge.merge_sorted_to_file(paths, SCHEMA, str(tmp_path / "out.parquet"), _options(), on_keys=on_keys,
                                   batch_size=64)
    assert len(calls) == 1, "after its error on_keys is not called again (the rest of the batches are dropped)"
    assert not any(t.name == "merge-key-tee" for t in threading.enumerate()), "the tee's thread has ended"


_MANY_KEYS_CHILD = """
import sys
import pyarrow as pa
from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from statestore.memory import InMemoryStateStore

s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(sys.argv[1]))
t = s.create_table("t", {"rowKeyFields": [{"name": "key", "type": "StringType"}],
                         "valueFields": [{"name": "value", "type": "StringType"}]},
                   properties={"sleeper.table.compaction.strategy": "basic"})
keys = [f"k{i:05d}" for i in range(10_000)]
for half in (keys[:5_000], keys[5_000:]):
    t.ingest(pa.table({"key": half, "value": half}))
t.delete(keys=keys[::2])  # 5,000 keys: 5,000 regions in one tombstone
t.compact(runner="local")  # DataFusion merges both files, the tombstone's filter on each
got = t.query(ranges=[("", None)]).column("key").to_pylist()
print(len(got), got == keys[1::2])
"""


def test_a_delete_of_thousands_of_keys_filters_the_merge_without_overflowing_datafusions_stack(tmp_path):
    """A delete of 5,000 keys is a tombstone of 5,000 regions; as one chain of ORs its
    filter overflowed a DataFusion worker thread's stack (a segfault that killed the
    process: the erasure oracle's ``delete_many`` step). Run in a child so a crash is a
    failure here, not a lost test worker."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {"PYTHONPATH": f"{root / 'plugins'}:{root}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", _MANY_KEYS_CHILD, str(tmp_path / "in.parquet")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.split() == ["5000", "True"], "exactly the 5,000 keys not deleted remain"


@pytest.mark.parametrize("key_type,arrow_type,make", [("LongType", pa.int64(), lambda i: i - 50),
                                                       ("IntType", pa.int32(), lambda i: i - 50),
                                                       ("StringType", pa.string(), lambda i: f"k{i:03d}"),
                                                       ("ByteArrayType", pa.binary(), lambda i: b"k%03d" % i)])
def test_exact_keys_and_ranges_of_tombstones_drop_exactly_the_model_rows(tmp_path, key_type, arrow_type, make):
    from sleeper_ops.engine.key_regions import exact_key_region, range_region
    from statestore.deletes import Tombstone

    schema = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": key_type}, {"name": "k2", "type": "LongType"}],
                               "valueFields": [{"name": "v", "type": "StringType"}]})
    keys = [make(i) for i in range(100)]
    path = str(tmp_path / "in.parquet")
    pq.write_table(pa.table({"key": pa.array(keys, arrow_type), "k2": pa.array(range(100), pa.int64()),
                             "v": [str(i) for i in range(100)]}), path)
    exact = keys[3:40:3]
    tombs = [Tombstone(number=1, regions=tuple(exact_key_region(schema, [k]) for k in exact)),
             Tombstone(number=2, regions=(range_region(schema, keys[60], keys[70]),
                                          exact_key_region(schema, [keys[90], 90]),  # both fields: not a whole key
                                          exact_key_region(schema, [keys[91], 7])))]  # no such row
    got = [r["key"] for b in merge_sorted([path], schema, deletes=[tombs]) for r in b.to_pylist()]
    model = [k for i, k in enumerate(keys) if k not in exact and not 60 <= i < 70 and i != 90]
    assert got == model
