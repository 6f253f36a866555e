"""Bulk import on Spark against standard ingest of the same files, in one run (not a
pass/fail test).

Input: ``--rows`` rows of Sleeper's system-test schema (string key, long sort key, two
string values) in ``--files`` Parquet files. Every table has 8 leaf partitions (so no
pre-split). Each import goes into a fresh table.

Two shapes:

* **standing** (the default): a Spark standalone cluster kept up for the whole run
  (``--workers`` workers of ``--cores`` cores, started by the bench, or ``--master``
  and ``--service`` given) and the Sleeper Spark service holding one SparkSession on
  it (:mod:`sleeper_ops.spark.service`). Standard ingest and the bulk import alternate
  ``--repeat`` times; the headline is the bulk import's **wall-clock** rate (from the
  call to its return: the HTTP submission, the queue, the Spark jobs and the commit)
  against standard ingest's in the same run, median of the repeats with their range.
  ``--submit`` adds one spark-submit import on ``local[2]`` once the cluster has
  stopped (the shape before issue 20; the service holds all of the cluster's cores, so
  a spark-submit there would wait for executors), for comparison.
* ``--spark-submit-only``: as before issue 20, one spark-submit per import on
  ``--master`` (default ``local[2]``), each shuffle of ``--shuffle``.

Every bulk import's leaf files are checked: each leaf's file is sorted by key then
timestamp and holds only its leaf's keys; taken leaf by leaf, they hold exactly the
input's rows (every column compared, each row once). The headline is always the
wall-clock rate, submission included, against standard ingest's in the same run; the
rate inside the Spark job is printed beside it, never as a ratio.

    .venv/bin/python bench/bulk_import.py [--rows 10000000] [--files 10] [--repeat 3] [--submit]
    .venv/bin/python bench/bulk_import.py --master spark://HOST:7077 --service http://HOST:8998
    .venv/bin/python bench/bulk_import.py --spark-submit-only [--master local[2]] [--shuffle runs spark]

Goals (issue 20): >= 1 M rows/s wall-clock, >= 1.0 of standard ingest. Sleeper's
anchor: 3.5-4.3 M rows/s on a whole EMR/EKS cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import _common  # noqa: F401  (sets sys.path)
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _common import bench_sleeper, parse_args

from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points

PROPS = {"sleeper.table.bulk.import.min.leaf.partitions": "8", "sleeper.table.bulk.import.min.rows.per.leaf": "1"}


COLUMNS = ["key", "timestamp", "value1", "value2"]
ALL_COLUMNS = [(c, "ascending") for c in COLUMNS]


def sorted_input(src: Path) -> Any:
    """Every input row, sorted by all columns: what the leaf files must hold, in order."""
    return pq.read_table(src, columns=COLUMNS).sort_by(ALL_COLUMNS).combine_chunks()


def check_leaves(s: Any, t: Any, expected: Any) -> None:
    """Each leaf's files sorted by (key, timestamp) and inside the leaf; taken leaf by
    leaf in key order, they hold exactly the rows of ``expected`` (every column, each
    row once), as bench/compaction.py checks its output."""
    state = t.state()
    by_leaf: dict[str, list[Any]] = {}
    for ref in state.references.values():
        data = pq.read_table(s.objects.path(ref.filename), columns=COLUMNS)
        key, ts = data.column("key"), data.column("timestamp")
        assert data.num_rows == ref.record_count, ref.filename
        if data.num_rows > 1:
            a, b = key.slice(0, len(key) - 1), key.slice(1)
            in_order = pc.or_(pc.less(a, b), pc.and_(pc.equal(a, b),
                                                     pc.less_equal(ts.slice(0, len(ts) - 1), ts.slice(1))))
            assert pc.all(in_order).as_py(), f"{ref.filename}: rows out of key order"
        r = state.partitions[ref.partition_id].region.ranges[0]
        assert r.min is None or pc.min(key).as_py() >= r.min, f"{ref.filename}: a key below its leaf"
        assert r.max is None or pc.max(key).as_py() < r.max, f"{ref.filename}: a key above its leaf"
        by_leaf.setdefault(ref.partition_id, []).append(data)
    offset = 0
    leaves = sorted(by_leaf, key=lambda p: state.partitions[p].region.ranges[0].min or "")
    for leaf in leaves:
        got = pa.concat_tables(by_leaf[leaf]).sort_by(ALL_COLUMNS).combine_chunks()
        got = got.cast(expected.schema)  # the leaf files' key fields are non-nullable
        assert got.equals(expected.slice(offset, got.num_rows)), f"leaf {leaf}: rows differ from the input's"
        offset += got.num_rows
    assert offset == expected.num_rows, f"{offset:,} rows in the leaf files, expected {expected.num_rows:,}"


@contextlib.contextmanager
def _cluster(args: argparse.Namespace) -> Iterator[tuple[str, Optional[str], list[str]]]:
    """(master, service URL, description lines): given, or a standing cluster started here."""
    if args.master is not None and args.master.startswith("spark://") and args.service is not None:
        yield args.master, args.service, [f"given: master {args.master}, service {args.service}"]
        return
    from sleeper_ops.spark.cluster import standing_cluster

    with tempfile.TemporaryDirectory(prefix="sleeper-bench-spark-") as work:
        started = time.perf_counter()
        with standing_cluster(Path(work), workers=args.workers, cores=args.cores, memory="2g") as c:
            lines = [f"started by the bench in {time.perf_counter() - started:.1f} s (paid once):", *c.describe()]
            yield c.master, c.service, lines


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):>12,.0f} rows/s  (range {min(xs):,.0f}-{max(xs):,.0f}, n={len(xs)})"


def standing(args: argparse.Namespace, s: Any, src: Path, paths: list[str], n: int, expected: Any) -> None:
    assert s.config is not None
    with _cluster(args) as (master, service, lines):
        print(f"Spark standalone cluster ({args.workers} workers x {args.cores} core) and the Sleeper Spark service:")
        for line in lines:
            print(f"  {line}")
        ingest, wall, inside, submit = [], [], [], []
        for rep in range(args.repeat):
            t = s.create_table(f"ingest_{rep}", SYSTEM_TEST_SCHEMA, split_points=split_points(7), properties=PROPS)
            t0 = time.perf_counter()
            r = t.ingest(paths)
            ingest.append(n / (time.perf_counter() - t0))
            assert r.records == n

            s.config = dataclasses.replace(s.config, spark_master=master, spark_service=service)
            t = s.create_table(f"bulk_{rep}", SYSTEM_TEST_SCHEMA, split_points=split_points(7), properties=PROPS)
            t0 = time.perf_counter()
            b = t.bulk_import([str(src)], import_key=f"bench-{rep}")
            wall_s = time.perf_counter() - t0
            assert b.status == "committed" and b.records == n, b
            check_leaves(s, t, expected)
            wall.append(n / wall_s)
            inside.append(n / b.seconds)
            print(f"  run {rep + 1}: standard ingest {ingest[-1]:,.0f} rows/s; bulk import on the service "
                  f"{wall[-1]:,.0f} rows/s wall-clock ({wall_s:.1f} s), ratio {wall[-1] / ingest[-1]:.2f}; "
                  f"leaf files checked")
    if args.submit:  # after the cluster stopped: the service holds all its cores
        s.config = dataclasses.replace(s.config, spark_master="local[2]", spark_service=None)
        t = s.create_table("bulk_submit", SYSTEM_TEST_SCHEMA, split_points=split_points(7), properties=PROPS)
        t0 = time.perf_counter()
        b = t.bulk_import([str(src)], import_key="bench-submit")
        submit.append(n / (time.perf_counter() - t0))
        assert b.status == "committed" and b.records == n, b
        check_leaves(s, t, expected)
    base = statistics.median(ingest)
    ratios = [w / i for w, i in zip(wall, ingest)]
    print(f"\n  HEADLINE: bulk import on the standing service, wall-clock incl. submission: "
          f"{statistics.median(wall):,.0f} rows/s = {statistics.median(ratios):.2f} of standard ingest "
          f"(ratios {', '.join(f'{x:.2f}' for x in ratios)})")
    print(f"  standard ingest                               {_spread(ingest)}")
    print(f"  bulk import, service, wall-clock              {_spread(wall)}")
    print(f"  bulk import, service, inside the job          {_spread(inside)}")
    if submit:
        print(f"  bulk import, one spark-submit on local[2]     {submit[0]:>12,.0f} rows/s  "
              f"ratio to ingest {submit[0] / base:.2f}")
    print("  goals: >= 1,000,000 rows/s wall-clock; >= 1.0 of standard ingest")


def spark_submit_only(args: argparse.Namespace, s: Any, src: Path, paths: list[str], n: int, expected: Any) -> None:
    assert s.config is not None
    master = args.master or "local[2]"
    s.config = dataclasses.replace(s.config, spark_master=master, spark_service=None)
    t = s.create_table("ingest", SYSTEM_TEST_SCHEMA, split_points=split_points(7), properties=PROPS)
    t0 = time.perf_counter()
    r = t.ingest(paths)
    ingest_s = time.perf_counter() - t0
    assert r.records == n
    base = n / ingest_s
    print(f"  baseline: standard ingest                       {base:>12,.0f} rows/s  ({ingest_s:.1f} s)")
    walls: dict[str, float] = {}
    for shuffle in args.shuffle:
        t = s.create_table(f"bulk_{shuffle}", SYSTEM_TEST_SCHEMA, split_points=split_points(7), properties=PROPS)
        t0 = time.perf_counter()
        b = t.bulk_import([str(src)], import_key="bench", shuffle=shuffle)
        wall_s = time.perf_counter() - t0
        assert b.status == "committed" and b.records == n, b
        check_leaves(s, t, expected)
        walls[shuffle] = n / wall_s
        print(f"  bulk import ({shuffle:5s}), wall-clock incl. spark-submit {n / wall_s:>12,.0f} rows/s  "
              f"({wall_s:.1f} s)  ratio to ingest {n / wall_s / base:.2f}; leaf files checked")
        print(f"  bulk import ({shuffle:5s}), inside the job (not a wall-clock figure) "
              f"{n / b.seconds:>12,.0f} rows/s  ({b.seconds:.1f} s)")
    if walls:
        best = max(walls, key=lambda k: walls[k])
        print(f"\n  HEADLINE: bulk import wall-clock incl. spark-submit on {master}: {walls[best]:,.0f} rows/s "
              f"({best} shuffle) = {walls[best] / base:.2f} of standard ingest, in the same run")
    else:
        print("  bulk import: not run (no --shuffle; --smoke runs none)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--master", default=None, help="spark://... of a running cluster (with --service), or any "
                                                   "master with --spark-submit-only (default local[2])")
    ap.add_argument("--service", default=None, help="the URL of a running Sleeper Spark service")
    ap.add_argument("--workers", type=int, default=2, help="workers of the cluster the bench starts")
    ap.add_argument("--cores", type=int, default=1, help="cores of each worker the bench starts")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--submit", action="store_true",
                    help="also one spark-submit import on local[2] (the shape before the service)")
    ap.add_argument("--spark-submit-only", action="store_true", help="the pre-issue-20 shape: spark-submit each")
    ap.add_argument("--shuffle", nargs="+", default=["runs", "spark"], choices=["runs", "spark"])
    # smoke: ingest only, no Spark (a cluster or spark-submit alone takes 10-60 s)
    args = parse_args(ap, rows=20_000, files=2, shuffle=[], spark_submit_only=True, repeat=1)
    with bench_sleeper("postgres") as (s, d):
        src = d / "input"
        src.mkdir()
        per = args.rows // args.files
        for i in range(args.files):
            pq.write_table(generate_rows(per, seed=i), src / f"part-{i:03d}.parquet")
        expected = sorted_input(src)
        n = per * args.files
        paths = sorted(str(p) for p in src.iterdir())
        load = os.getloadavg()
        print(f"{n:,} rows in {args.files} Parquet files; tables of 8 leaf partitions; {os.cpu_count()} cores, "
              f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the start")
        if args.spark_submit_only:
            spark_submit_only(args, s, src, paths, n, expected)
        else:
            standing(args, s, src, paths, n, expected)
        load = os.getloadavg()
        print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end")


if __name__ == "__main__":
    main()
