"""Bulk import on Spark against standard ingest of the same files, in one run (not a
pass/fail test).

Input: ``--rows`` rows of Sleeper's system-test schema (string key, long sort key, two
string values) in ``--files`` Parquet files. Both tables have 8 leaf partitions (so no
pre-split). Prints rows/s of standard ingest (the baseline), of the bulk import inside
the job (from its result: planning, the Spark job and the commit) and including
spark-submit's start, with the ratios to the baseline.

    .venv/bin/python bench/bulk_import.py [--rows 10000000] [--files 10] [--master local[2]]

Goals (issue 10): >= 1 M rows/s inside the job on local[2], and >= 0.8 of standard
ingest's rate. Sleeper's anchor: 3.5-4.3 M rows/s on a whole EMR/EKS cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import _common  # noqa: F401  (sets sys.path)
import pyarrow.parquet as pq
from _common import bench_sleeper, parse_args

from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points

PROPS = {"sleeper.table.bulk.import.min.leaf.partitions": "8"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--shuffle", nargs="+", default=["runs", "spark"], choices=["runs", "spark"])
    args = parse_args(ap, rows=20_000, files=2, shuffle=[])  # smoke: no spark-submit (10-18 s alone)
    with bench_sleeper("postgres") as (s, d):
        assert s.config is not None
        s.config = dataclasses.replace(s.config, spark_master=args.master)
        src = d / "input"
        src.mkdir()
        per = args.rows // args.files
        for i in range(args.files):
            pq.write_table(generate_rows(per, seed=i), src / f"part-{i:03d}.parquet")
        n = per * args.files
        paths = sorted(str(p) for p in src.iterdir())
        print(f"{n:,} rows in {args.files} Parquet files; tables of 8 leaf partitions; Spark {args.master}")

        t = s.create_table("ingest", SYSTEM_TEST_SCHEMA, split_points=split_points(7), properties=PROPS)
        t0 = time.perf_counter()
        r = t.ingest(paths)
        ingest_s = time.perf_counter() - t0
        assert r.records == n

        base = n / ingest_s
        print(f"  baseline: standard ingest                       {base:>12,.0f} rows/s  ({ingest_s:.1f} s)")
        for shuffle in args.shuffle:
            t = s.create_table(f"bulk_{shuffle}", SYSTEM_TEST_SCHEMA, split_points=split_points(7), properties=PROPS)
            t0 = time.perf_counter()
            b = t.bulk_import([str(src)], import_key="bench", shuffle=shuffle)
            wall_s = time.perf_counter() - t0
            assert b.status == "committed" and b.records == n, b
            assert sum(x.record_count for x in t.state().references.values()) == n
            print(f"  bulk import ({shuffle:5s}), inside the job         {n / b.seconds:>12,.0f} rows/s  "
                  f"({b.seconds:.1f} s)  ratio to ingest {n / b.seconds / base:.2f}")
            print(f"  bulk import ({shuffle:5s}), with spark-submit start {n / wall_s:>12,.0f} rows/s  "
                  f"({wall_s:.1f} s)  ratio to ingest {n / wall_s / base:.2f}")
        if not args.shuffle:
            print("  bulk import: not run (no --shuffle; --smoke runs none)")
        print("  goals: >= 1,000,000 rows/s inside the job on local[2]; >= 0.8 of standard ingest")


if __name__ == "__main__":
    main()
