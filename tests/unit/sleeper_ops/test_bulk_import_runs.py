"""The Spark bulk import's executor stages run in-process, without Spark: read tasks
write sorted Arrow IPC runs per leaf, and merge tasks turn each leaf's runs into its
file; plus how input files are packed into read tasks."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.bulk_import.sources import pack_files
from sleeper_ops.engine import key_order, merge
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.spark import bulk_executor
from sleeper_ops.spark.bulk_driver import _merge_tasks
from sleeper_ops.spark.executor import table_to_dict
from statestore.catalog import TableInfo
from statestore.partitions import partitions_from_split_points
from statestore.schema import Schema

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}],
                           "sortKeyFields": [{"name": "ts", "type": "LongType"}],
                           "valueFields": [{"name": "v", "type": "StringType"}]})


@pytest.mark.parametrize("seed", range(20))
def test_packs_hold_every_file_once_and_balance_their_bytes(seed):
    rng = random.Random(seed)
    files = [f"f{i}" for i in range(rng.randint(1, 40))]
    sizes = [rng.randint(1, 1000) for _ in files]
    want = rng.randint(1, 12)
    packs = pack_files(files, sizes, want)
    assert sorted(f for p in packs for f in p) == sorted(files)
    assert len(packs) == min(want, len(files)) and all(packs)
    size = dict(zip(files, sizes))
    loads = [sum(size[f] for f in p) for p in packs]
    assert loads == sorted(loads, reverse=True)  # the heaviest task is scheduled first
    # largest-first into the lightest: no pack exceeds the lightest by more than one file
    assert loads[0] - loads[-1] <= max(sizes)


@pytest.mark.parametrize("seed", range(20))
def test_merge_tasks_hold_each_leafs_runs_once_and_balance_their_rows(seed):
    """A merge task per core, not per leaf: each leaf's runs in exactly one task, no more
    tasks than asked, their rows balanced as the file packs are (largest leaf first into
    the lightest task)."""
    rng = random.Random(seed)
    runs = [(f"leaf{rng.randint(0, 15)}", f"run{i}", rng.randint(1, 1000)) for i in range(rng.randint(1, 60))]
    tasks = rng.randint(1, 6)
    groups = _merge_tasks(runs, tasks)
    leaves = {leaf for leaf, _, _ in runs}
    assert len(groups) == min(tasks, len(leaves)) and all(groups)
    got = [leaf for group in groups for leaf, _ in group]
    assert sorted(got) == sorted(leaves), "each leaf in one task, once"
    model: dict[str, list[str]] = {}
    for leaf, run, _ in runs:
        model.setdefault(leaf, []).append(run)
    assert {leaf: sorted(rs) for group in groups for leaf, rs in group} == {k: sorted(v) for k, v in model.items()}
    rows = {leaf: sum(n for lf, _, n in runs if lf == leaf) for leaf in leaves}
    loads = [sum(rows[leaf] for leaf, _ in group) for group in groups]
    assert loads == sorted(loads, reverse=True)
    assert loads[0] - loads[-1] <= max(rows.values())


@pytest.mark.parametrize("codec, written", [(None, "UNCOMPRESSED"), ("zstd", "ZSTD")])
def test_bulk_import_writes_its_leaf_files_in_the_ingest_codec_on_both_shuffles(tmp_path, codec, written):
    """Bulk import writes the ingest level, as standard ingest and flush do (ADR 0018):
    ``sleeper.table.ingest.parquet.compression.codec``, uncompressed by default, not the
    codec compaction writes (zstd)."""
    properties = {} if codec is None else {"sleeper.table.ingest.parquet.compression.codec": codec}
    pq.write_table(_rows(600, 2), tmp_path / "in.parquet")
    parts = partitions_from_split_points(SCHEMA, ["k500"])
    leaves = sorted(p.id for p in parts if p.is_leaf)
    objects = ObjectStore(str(tmp_path / "store"))
    context = {"uri": objects.uri, "s3": None, "table": table_to_dict(TableInfo("t1", "t", SCHEMA, properties)),
               "partitions": [p.to_dict() for p in parts], "leaves": leaves,
               "output_keys": {leaf: f"data/{leaf}.parquet" for leaf in leaves}, "run_prefix": "runs/a1"}
    runs = list(bulk_executor.sort_runs_of(context, [[str(tmp_path / "in.parquet")]]))
    merged = [key for _, key, _ in bulk_executor.merge_runs_of(context, _merge_tasks(runs, 2))]
    tagged = list(bulk_executor.read_and_tag(context, [pa.record_batch({"path": [str(tmp_path / "in.parquet")]})]))
    shuffled = [key for b in bulk_executor.write_leaves(context, tagged) for key in b.column("key").to_pylist()]
    assert len(merged) == len(shuffled) == 2
    for key in merged + shuffled:
        md = pq.ParquetFile(objects.path(key)).metadata
        assert {md.row_group(g).column(c).compression for g in range(md.num_row_groups)
                for c in range(md.num_columns)} == {written}, key
    assert sum(pq.ParquetFile(objects.path(k)).metadata.num_rows for k in merged) == 600
    assert sum(pq.ParquetFile(objects.path(k)).metadata.num_rows for k in shuffled) == 600


def test_packing_with_unknown_sizes_spreads_files_evenly_and_bad_sizes_are_refused():
    assert [len(p) for p in pack_files([f"f{i}" for i in range(10)], [], 4)] == [3, 3, 2, 2]
    assert pack_files([], [], 4) == []
    with pytest.raises(ValueError):
        pack_files(["a", "b"], [1], 2)


def _rows(n: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    keys = [f"k{rng.randint(0, 999):03d}" for _ in range(n)]
    return pa.table({"key": keys, "ts": pa.array([rng.randint(0, 50) for _ in range(n)], pa.int64()),
                     "v": [f"s{seed}-{i}" for i in range(n)]})


@pytest.mark.parametrize("sort", ["prefix numbers", "per leaf"])
def test_runs_then_merge_give_each_leaf_its_rows_sorted_once(tmp_path, monkeypatch, sort):
    """Runs sorted as standard ingest sorts (``prefix numbers``: Arrow's per-leaf sort is
    never called) or, where that does not apply, each leaf's rows sorted in Arrow."""
    monkeypatch.setattr(bulk_executor, "RUN_ROWS", 700)  # several runs per read task
    if sort == "per leaf":
        monkeypatch.setattr(bulk_executor, "sorted_by_leaf", lambda *a: None)
    else:  # (these keys tie often: never give the ties up to the other path)
        monkeypatch.setattr(key_order, "MAX_TIED_SHARE", 1)
        monkeypatch.setattr(bulk_executor, "sorted_rows", lambda *a: pytest.fail("sorted per leaf"))
    inputs = []
    for i in range(5):
        pq.write_table(_rows(1000, i), tmp_path / f"in{i}.parquet")
        inputs.append(str(tmp_path / f"in{i}.parquet"))
    parts = partitions_from_split_points(SCHEMA, ["k250", "k500", "k750"])
    leaves = sorted(p.id for p in parts if p.is_leaf)
    objects = ObjectStore(str(tmp_path / "store"))
    context = {"uri": objects.uri, "s3": None, "table": table_to_dict(TableInfo("t1", "t", SCHEMA)),
               "partitions": [p.to_dict() for p in parts], "leaves": leaves,
               "output_keys": {leaf: f"data/{leaf}.parquet" for leaf in leaves}, "run_prefix": "runs/a1"}

    runs = list(bulk_executor.sort_runs_of(context, pack_files(inputs, [], 2)))
    assert runs and all(run.endswith(".arrow") for _, run, _ in runs)
    assert len({run for _, run, _ in runs}) == len(runs)  # no two runs share a name
    assert sum(rows for _, _, rows in runs) == 5000

    written = [dict(zip(("leaf", "key", "records"), w))
               for w in bulk_executor.merge_runs_of(context, _merge_tasks(runs, 2))]
    assert sorted(w["leaf"] for w in written) == leaves
    model = sorted((r["key"], r["ts"], r["v"]) for i in range(5) for r in _rows(1000, i).to_pylist())
    bounds = {p.id: (p.region.ranges[0].min, p.region.ranges[0].max) for p in parts if p.is_leaf}
    got_all = []
    for w in written:
        got = pq.read_table(objects.path(w["key"])).to_pylist()
        assert w["records"] == len(got)
        lo, hi = bounds[w["leaf"]]
        assert all(lo <= r["key"] and (hi is None or r["key"] < hi) for r in got)
        assert [(r["key"], r["ts"]) for r in got] == sorted((r["key"], r["ts"]) for r in got)
        got_all += got
    assert sorted((r["key"], r["ts"], r["v"]) for r in got_all) == model


def test_merging_arrow_runs_is_a_streaming_merge_with_no_sort(tmp_path):
    paths = []
    for i in range(3):
        t = _rows(200, i).sort_by([("key", "ascending"), ("ts", "ascending")])
        p = str(tmp_path / f"r{i}.arrow")
        with pa.OSFile(p, "wb") as f, pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)
        paths.append(p)
    plan = merge.explain_merge(paths, SCHEMA)
    assert "SortPreservingMergeExec" in plan and "SortExec" not in plan.replace("SortPreservingMergeExec", "")
    out = pa.Table.from_batches(list(merge.merge_sorted(paths, SCHEMA)))
    model = sorted((r["key"], r["ts"]) for i in range(3) for r in _rows(200, i).to_pylist())
    assert list(zip(out.column("key").to_pylist(), out.column("ts").to_pylist())) == model


def test_two_attempts_of_the_read_and_merge_tasks_write_runs_and_leaf_files_of_their_own(tmp_path, monkeypatch):
    """Issue 18, finding 3: a duplicate attempt (speculation, a lost executor) wrote the
    same run and leaf keys as the first, so its failure could delete what the driver used."""
    from sleeper_ops.io.attempts import named_key
    from sleeper_ops.spark import attempts

    pq.write_table(_rows(500, 1), tmp_path / "in.parquet")
    parts = partitions_from_split_points(SCHEMA, ["k500"])
    leaves = sorted(p.id for p in parts if p.is_leaf)
    objects = ObjectStore(str(tmp_path / "store"))
    context = {"uri": objects.uri, "s3": None, "table": table_to_dict(TableInfo("t1", "t", SCHEMA)),
               "partitions": [p.to_dict() for p in parts], "leaves": leaves,
               "output_keys": {leaf: f"data/{leaf}.parquet" for leaf in leaves}, "run_prefix": "runs/a1"}
    runs, written = {}, {}
    for tag in ("3", "9"):
        monkeypatch.setattr(attempts, "task_attempt_tag", lambda tag=tag: tag)
        runs[tag] = list(bulk_executor.sort_runs_of(context, [[str(tmp_path / "in.parquet")]]))
        written[tag] = list(bulk_executor.merge_runs_of(context, _merge_tasks(runs[tag], 1)))
    for kind in (runs, written):
        first, second = ({key for _, key, _ in kind[tag]} for tag in ("3", "9"))
        assert len(first) == len(second) == 2 and not first & second, "each attempt's keys are its own"
        assert {named_key(k) for k in first} == {named_key(k) for k in second}, "named after the same plan"
    assert {named_key(k) for _, k, _ in written["3"]} == set(context["output_keys"].values())
    assert all(objects.head(k) is not None for tag in written for _, k, _ in written[tag])
    assert sum(n for _, _, n in written["9"]) == 500
