"""An append written as a few files shared by the leaves they span (issue 36): fewer
objects, every leaf reading only its rows, a shared file kept until no leaf references
it, and every record of the input exactly once. The expected leaf of each key comes
from the split points by bisection (a model of its own), not from the code under test."""

from __future__ import annotations

import bisect
import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points
from sleeper_ops.ingest.shared_files import MIN_FILE_ROWS, leaf_groups
from statestore.partitions import Partition
from statestore.region import Range, Region

FAR_FUTURE = 2**62
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "sortKeyFields": [],
          "valueFields": [{"name": "v", "type": "StringType"}]}


def _leaf(i: int) -> Partition:
    return Partition(f"p{i}", Region((Range("key", i, i + 1),)), None, ())


@pytest.mark.parametrize("seed", range(40))
def test_leaf_groups_are_contiguous_never_empty_and_about_equal(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.choice([0, rng.randrange(1, 5), rng.randrange(1, 200_000)]) for _ in range(rng.randrange(1, 20))]
    bounds = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    slices = [(_leaf(i), a, b) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    files = rng.randrange(1, 5)
    groups = leaf_groups(slices, files)
    runs = [r for g in groups for r in g]
    assert [(r.leaf.id, r.start, r.end) for r in runs] == [(p.id, a, b) for p, a, b in slices if b > a]
    assert all(groups) and len(groups) <= files
    total = sum(sizes)
    if total:
        assert len(groups) <= max(1, total // MIN_FILE_ROWS)
        biggest = max(sizes)
        assert all(sum(r.rows for r in g) <= total / len(groups) + biggest for g in groups)
    if total >= files * MIN_FILE_ROWS and len([s for s in sizes if s]) >= files and max(sizes) < total / files / 2:
        assert len(groups) == files, "a big chunk over many leaves is written as one file a thread"


def _model_counts(keys: list[str], points: list[str]) -> Counter[int]:
    return Counter(bisect.bisect_right(points, k) for k in keys)


def test_an_append_over_16_leaves_writes_one_file_a_thread_each_leaf_in_row_groups_of_its_own(
        sleeper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    points = split_points(15)
    t = sleeper.create_table("t", SYSTEM_TEST_SCHEMA, split_points=points)
    data = generate_rows(200_000, seed=7)
    result = t.ingest([str(_parquet(tmp_path / "in.parquet", data))])
    data_dir = tmp_path / "data" / t.info.table_id / "data"
    objects = sorted(p.suffix for p in data_dir.rglob("*") if p.is_file())
    assert objects == [".parquet", ".parquet", ".sketches", ".sketches"], "2 files and 2 sidecars, not 32 objects"
    state = t.state()
    leaves = sorted((p for p in state.partitions.values() if p.is_leaf), key=lambda p: p.region.ranges[0].min)
    model = _model_counts(data.column("key").to_pylist(), points)
    counts = {r.partition_id: r.record_count for r in state.references.values()}
    assert [counts[p.id] for p in leaves] == [model[i] for i in range(16)]
    assert not any(r.whole_file or r.count_approximate for r in state.references.values())
    assert result.records == 200_000 and len(result.files) == 16
    for path in data_dir.rglob("*.parquet"):
        md = pq.ParquetFile(path).metadata
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(0).statistics
            lo, hi = bisect.bisect_right(points, st.min), bisect.bisect_right(points, st.max)
            assert lo == hi, f"row group {g} of {path.name} holds rows of two leaves"
        assert md.row_group(0).column(0).compression == "UNCOMPRESSED", "ingest writes its own codec (none)"
    got = t.query(ranges=[("", None)])
    assert Counter(got.column("key").to_pylist()) == Counter(data.column("key").to_pylist())
    assert got.num_rows == 200_000


def test_the_ingest_codec_is_the_tables_to_set_and_compaction_writes_the_tables_codec(
        sleeper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    t = sleeper.create_table("z", SCHEMA, properties={"sleeper.table.ingest.parquet.compression.codec": "zstd",
                                                      "sleeper.table.compaction.strategy": "basic"})
    t.ingest(pa.table({"key": pa.array(range(100), pa.int64()), "v": ["x"] * 100}))
    u = sleeper.create_table("u", SCHEMA, properties={"sleeper.table.compaction.strategy": "basic"})
    for lo in (0, 100):
        u.ingest(pa.table({"key": pa.array(range(lo, lo + 100), pa.int64()), "v": ["x"] * 100}))
    u.compact(runner="local")

    def codecs(table) -> set[str]:  # type: ignore[no-untyped-def]
        return {pq.ParquetFile(tmp_path / "data" / f).metadata.row_group(0).column(0).compression
                for f in {r.filename for r in table.state().references.values()}}
    assert codecs(t) == {"ZSTD"}
    assert codecs(u) == {"ZSTD"}, "compaction rewrites the ingest level in the table's codec"


def test_a_shared_file_outlives_the_compaction_of_one_leaf_and_goes_when_no_leaf_references_it(
        sleeper) -> None:  # type: ignore[no-untyped-def]
    t = sleeper.create_table("s", SCHEMA, split_points=[100], properties={"sleeper.table.compaction.strategy": "basic"})
    rows = pa.table({"key": pa.array(range(200), pa.int64()), "v": [f"a{i}" for i in range(200)]})
    t.ingest(rows)
    (shared,) = t.state().files
    t.ingest(pa.table({"key": pa.array(range(1000, 1001), pa.int64()), "v": ["b"]}))  # the right leaf only
    t.compact(runner="local")  # the right leaf's two files: one job; the left leaf has one file
    refs = list(t.state().references.values())
    assert {r.filename for r in refs} >= {shared}, "the left leaf still reads the shared file"
    assert shared not in t.gc(now_ms=FAR_FUTURE).deleted
    assert sleeper.objects.head(shared) is not None
    t.ingest(pa.table({"key": pa.array(range(-5, -4), pa.int64()), "v": ["c"]}))  # now the left leaf compacts
    t.compact(runner="local")
    assert shared not in {r.filename for r in t.state().references.values()}
    assert shared in t.gc(now_ms=FAR_FUTURE).deleted and sleeper.objects.head(shared) is None
    got = t.query(ranges=[(-2**63, None)])
    assert sorted(got.column("key").to_pylist()) == [-5, *range(200), 1000]


def test_a_split_of_a_leaf_holding_shared_files_splits_inside_it_and_keeps_every_record(
        sleeper) -> None:  # type: ignore[no-untyped-def]
    t = sleeper.create_table("p", SCHEMA, split_points=[1000],
                             properties={"sleeper.table.partition.splitting.threshold": "500"})
    keys = list(range(0, 1000, 2)) + list(range(1000, 1100))  # 500 left, 100 right
    t.ingest(pa.table({"key": pa.array(keys, pa.int64()), "v": ["x"] * len(keys)}))
    t.ingest(pa.table({"key": pa.array(range(1, 1000, 2), pa.int64()), "v": ["y"] * 500}))
    report = t.split()
    assert len(report.splits) == 1
    mins = sorted(p.region.ranges[0].min for p in t.state().partitions.values() if p.is_leaf)
    assert len(mins) == 3 and mins[2] == 1000
    point = mins[1]
    assert 0 < point < 1000, f"the split point {point} is not inside the left leaf's keys (the shared file's sketch " \
                             "covers the right leaf's keys too)"
    t.compact(runner="local")
    got = t.query(ranges=[(-2**63, None)]).column("key").to_pylist()
    assert Counter(got) == Counter(keys + list(range(1, 1000, 2)))


def _parquet(path: Path, table: pa.Table) -> Path:
    pq.write_table(table, path)
    return path


def test_files_of_one_leaf_each_and_shared_files_compact_together_with_every_record_once(
        sleeper) -> None:  # type: ignore[no-untyped-def]
    """A table written before shared files (one file a leaf, as a spilled ingest still
    writes) takes shared files beside them, and compaction merges both kinds."""
    from sleeper_ops.ingest.standard import IngestRunner

    t = sleeper.create_table("old", SCHEMA, split_points=[100, 200],
                             properties={"sleeper.table.compaction.strategy": "basic"})
    first = pa.table({"key": pa.array(range(0, 300, 3), pa.int64()), "v": ["old"] * 100})
    spilled = IngestRunner(sleeper.state_store, sleeper.objects, t.info, max_chunk_rows=40).ingest_table(first)
    assert spilled.spilled_chunks == 3 and all(r.whole_file for r in t.state().references.values())
    second = pa.table({"key": pa.array(range(1, 300, 3), pa.int64()), "v": ["new"] * 100})
    t.ingest(second)
    assert sum(not r.whole_file for r in t.state().references.values()) == 3
    t.compact(runner="local")
    state = t.state()
    assert len(state.references) == 3 and all(r.whole_file for r in state.references.values())
    got = t.query(ranges=[(-2**63, None)])
    assert Counter(zip(got.column("key").to_pylist(), got.column("v").to_pylist())) == Counter(
        [(k, "old") for k in range(0, 300, 3)] + [(k, "new") for k in range(1, 300, 3)])
