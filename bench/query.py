"""Exact-key and range query latency, and how it changes from 1 M to 10 M rows.

Each size is a fresh table of Sleeper's system-test schema with 16 leaf partitions,
ingested in one call (one file per leaf, as after compaction). Exact-key queries ask
for keys known to exist; range queries span about 1,000 records. Latency is wall
time of ``QueryRunner.query`` including the state store read. The figure of merit
is the ratio of the large table's p50 to the small table's p50, taken in this run.

    .venv/bin/python bench/query.py [--sizes 1000000 10000000] [--queries 300]
"""

from __future__ import annotations

import argparse
import random
import time

import _common  # noqa: F401
from _common import bench_sleeper, percentiles

from sleeper_ops.demo import KEY_SPACE, SYSTEM_TEST_SCHEMA, generate_rows, split_points
from sleeper_ops.query.runner import exact_key_region, range_region


def run(s, size: int, queries: int) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def]
    t = s.create_table(f"q{size}", SYSTEM_TEST_SCHEMA, split_points=split_points(15))
    batch = 2_000_000
    keys: list[str] = []
    batches = []
    for i in range(0, size, batch):
        data = generate_rows(min(batch, size - i), seed=100 + i)
        keys.extend(data.column("key").take(list(range(0, data.num_rows, max(1, data.num_rows // 200)))).to_pylist())
        batches.extend(data.to_batches())
    t0 = time.perf_counter()
    t.ingest(iter(batches), max_chunk_rows=4_000_000)
    print(f"  built {size:,} rows in {time.perf_counter() - t0:.1f}s "
          f"({len(t.state().references)} files)")
    del batches
    runner = t.query_runner()
    rng = random.Random(size)
    exact, ranged = [], []
    for _ in range(10):  # warm footers and connections
        runner.query([exact_key_region(t.schema, [rng.choice(keys)])])
    for _ in range(queries):
        k = rng.choice(keys)
        t0 = time.perf_counter()
        res = runner.query([exact_key_region(t.schema, [k])])
        exact.append((time.perf_counter() - t0) * 1000)
        assert res.num_rows >= 1
    width = KEY_SPACE * 1000 // size
    for _ in range(queries):
        lo = rng.randrange(0, KEY_SPACE - width)
        t0 = time.perf_counter()
        runner.query([range_region(t.schema, f"key-{lo:09d}", f"key-{lo + width:09d}")])
        ranged.append((time.perf_counter() - t0) * 1000)
    runner.close()
    return {"exact": percentiles(exact), "range": percentiles(ranged)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--state-store", default="postgres", choices=["postgres", "memory"])
    args = ap.parse_args()
    results = {}
    with bench_sleeper(args.state_store) as (s, _):
        print(f"query latency (ms), state store {args.state_store}")
        for size in args.sizes:
            results[size] = run(s, size, args.queries)
            for kind, p in results[size].items():
                print(f"  {size:>12,} rows  {kind:<5}  p50 {p['p50']:6.2f}  p95 {p['p95']:6.2f}  p99 {p['p99']:6.2f}")
    small, large = args.sizes[0], args.sizes[-1]
    for kind in ("exact", "range"):
        print(f"  {kind} p50 ratio {large:,} / {small:,} rows: "
              f"{results[large][kind]['p50'] / results[small][kind]['p50']:.2f}")
    print("  goal: exact-key p50 <= 20 ms at 100 M rows")


if __name__ == "__main__":
    main()
