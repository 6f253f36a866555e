"""Standard ingest throughput against a plain pyarrow Parquet write of the same rows.

Schema: Sleeper's system test (string key, long sort key, two string values). The
input is one Parquet file; the table has 8 leaf partitions. The baseline reads the
same input and writes it as one zstd Parquet file with pyarrow defaults (no sort, no
partitioning, no sketches). Both run in this process, in this run.

    .venv/bin/python bench/ingest.py [--rows 5000000] [--state-store postgres|memory]
                                     [--rowgroup-rows N [N ...]]

``--rowgroup-rows`` measures ingest once per row group size (the tables'
``sleeper.table.parquet.rowgroup.rows.max``), all in this run against one baseline.
"""

from __future__ import annotations

import argparse
import time

import _common  # noqa: F401  (sets sys.path)
import pyarrow.parquet as pq
from _common import bench_sleeper, parse_args

from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--state-store", default="postgres", choices=["postgres", "memory"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--rowgroup-rows", type=int, nargs="+", default=[None])
    args = parse_args(ap, rows=20_000, repeat=1)

    with bench_sleeper(args.state_store) as (s, d):
        data = generate_rows(args.rows, seed=7)
        src = d / "input.parquet"
        pq.write_table(data, src)
        del data
        print(f"standard ingest of {args.rows:,} rows (string key, long sort key, 2 string values), "
              f"state store {args.state_store}")
        best_base = float("inf")
        best: dict = {}
        for i in range(args.repeat):
            t0 = time.perf_counter()
            pq.write_table(pq.read_table(src), d / f"copy-{i}.parquet", compression="zstd")
            best_base = min(best_base, time.perf_counter() - t0)
            for rg in args.rowgroup_rows:
                props = {} if rg is None else {"sleeper.table.parquet.rowgroup.rows.max": str(rg)}
                t = s.create_table(f"bench{i}_{rg}", SYSTEM_TEST_SCHEMA, split_points=split_points(7), properties=props)
                t0 = time.perf_counter()
                r = t.ingest([str(src)])
                best[(rg, "ingest")] = min(best.get((rg, "ingest"), float("inf")), time.perf_counter() - t0)
                assert r.records == args.rows

                t = s.create_table(f"spill{i}_{rg}", SYSTEM_TEST_SCHEMA, split_points=split_points(7),
                                   properties=props)
                t0 = time.perf_counter()
                r = t.ingest([str(src)], max_chunk_rows=max(1, args.rows // 4))
                best[(rg, "spill")] = min(best.get((rg, "spill"), float("inf")), time.perf_counter() - t0)
                assert r.records == args.rows and r.spilled_chunks >= 4
        n = args.rows
        print(f"  baseline: pyarrow read + write zstd  {n / best_base:>12,.0f} rows/s")
        for rg in args.rowgroup_rows:
            label = "" if rg is None else f" ({rg}-row groups)"
            print(f"  ingest, in-memory sort{label:<18} {n / best[(rg, 'ingest')]:>12,.0f} rows/s   "
                  f"ratio to baseline {best_base / best[(rg, 'ingest')]:.2f}")
            print(f"  ingest, 4 spilled chunks + merge{label:<8} {n / best[(rg, 'spill')]:>12,.0f} rows/s   "
                  f"ratio to baseline {best_base / best[(rg, 'spill')]:.2f}")
        print("  goal: >= 1,000,000 rows/s on 2 cores")


if __name__ == "__main__":
    main()
