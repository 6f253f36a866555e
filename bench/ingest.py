"""Standard ingest throughput against a plain pyarrow Parquet write of the same rows.

Schema: Sleeper's system test (string key, long sort key, two string values). The
input is one Parquet file; the table has 8 leaf partitions. The baseline reads the
same input and writes it as one zstd Parquet file with pyarrow defaults (no sort, no
partitioning, no sketches). Both run in this process, in this run.

    .venv/bin/python bench/ingest.py [--rows 5000000] [--state-store postgres|memory]
"""

from __future__ import annotations

import argparse
import time

import _common  # noqa: F401  (sets sys.path)
import pyarrow.parquet as pq
from _common import bench_sleeper

from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--state-store", default="postgres", choices=["postgres", "memory"])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    with bench_sleeper(args.state_store) as (s, d):
        data = generate_rows(args.rows, seed=7)
        src = d / "input.parquet"
        pq.write_table(data, src)
        del data
        print(f"standard ingest of {args.rows:,} rows (string key, long sort key, 2 string values), "
              f"state store {args.state_store}")
        best_base = best_ingest = best_spill = float("inf")
        for i in range(args.repeat):
            t0 = time.perf_counter()
            pq.write_table(pq.read_table(src), d / f"copy-{i}.parquet", compression="zstd")
            best_base = min(best_base, time.perf_counter() - t0)

            t = s.create_table(f"bench{i}", SYSTEM_TEST_SCHEMA, split_points=split_points(7))
            t0 = time.perf_counter()
            r = t.ingest([str(src)])
            best_ingest = min(best_ingest, time.perf_counter() - t0)
            assert r.records == args.rows

            t = s.create_table(f"spill{i}", SYSTEM_TEST_SCHEMA, split_points=split_points(7))
            t0 = time.perf_counter()
            r = t.ingest([str(src)], max_chunk_rows=max(1, args.rows // 4))
            best_spill = min(best_spill, time.perf_counter() - t0)
            assert r.records == args.rows and r.spilled_chunks >= 4
        n = args.rows
        print(f"  baseline: pyarrow read + write zstd  {n / best_base:>12,.0f} rows/s")
        print(f"  ingest, in-memory sort               {n / best_ingest:>12,.0f} rows/s   "
              f"ratio to baseline {best_base / best_ingest:.2f}")
        print(f"  ingest, 4 spilled chunks + merge     {n / best_spill:>12,.0f} rows/s   "
              f"ratio to baseline {best_base / best_spill:.2f}")
        print("  goal: >= 1,000,000 rows/s on 2 cores")


if __name__ == "__main__":
    main()
