"""Exact-key and range query latency, and how it changes as the table grows.

Each size is a fresh table of Sleeper's system-test schema with 16 leaf partitions,
ingested in chunks of 4 M rows (generated as they are ingested, so 100 M rows fit in
memory), then compacted (``--no-compact``: not) so each leaf holds one file, as a
table does once maintenance has run. Exact-key queries ask for keys known to exist;
range queries span about 1,000 records. Latency is the wall time of ``Table.query``,
the user's path: the metadata refresh against the state store, the file reads and the
merge. The figure of merit is the ratio of the largest table's p50 to the smallest's,
taken in this run.

    .venv/bin/python bench/query.py [--sizes 1000000 100000000] [--queries 300]
                                    [--rowgroup-rows N]

Goals (issue 12; local disk, warm caches, 2 cores): exact-key p50 <= 1 ms and p95 <=
3 ms, range p50 <= 3 ms, p50 ratio 100 M / 1 M rows <= 1.3. The 10,000-leaf figures are
bench/query_leaves.py's.
"""

from __future__ import annotations

import argparse
import random
import time

import _common  # noqa: F401
from _common import bench_sleeper, parse_args, percentiles

from sleeper_ops.demo import KEY_SPACE, SYSTEM_TEST_SCHEMA, generate_rows, split_points


def run(s, size: int, queries: int, properties: dict[str, str], compact: bool) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def]
    t = s.create_table(f"q{size}", SYSTEM_TEST_SCHEMA, split_points=split_points(15), properties=properties)
    batch = 2_000_000
    keys: list[str] = []

    def batches():  # type: ignore[no-untyped-def]
        for i in range(0, size, batch):
            data = generate_rows(min(batch, size - i), seed=100 + i)
            step = max(1, data.num_rows // 200)
            keys.extend(data.column("key").take(list(range(0, data.num_rows, step))).to_pylist())
            yield from data.to_batches()
    t0 = time.perf_counter()
    t.ingest(batches(), max_chunk_rows=4_000_000)
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    while compact and len(t.state().references) > 16:
        t.compact(runner="local")
    print(f"  built {size:,} rows in {built:.1f} s, compacted in {time.perf_counter() - t0:.1f} s "
          f"({len(t.state().references)} files)", flush=True)
    rng = random.Random(size)
    exact, ranged = [], []
    for _ in range(10):  # warm footers and connections
        t.query(keys=[rng.choice(keys)])
    for _ in range(queries):
        k = rng.choice(keys)
        t0 = time.perf_counter()
        res = t.query(keys=[k])
        exact.append((time.perf_counter() - t0) * 1000)
        assert res.num_rows >= 1
    width = KEY_SPACE * 1000 // size
    for _ in range(queries):
        lo = rng.randrange(0, KEY_SPACE - width)
        t0 = time.perf_counter()
        t.query(ranges=[(f"key-{lo:09d}", f"key-{lo + width:09d}")])
        ranged.append((time.perf_counter() - t0) * 1000)
    return {"exact": percentiles(exact), "range": percentiles(ranged)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--state-store", default="postgres", choices=["postgres", "memory"])
    ap.add_argument("--rowgroup-rows", type=int, default=None, help="sleeper.table.parquet.rowgroup.rows.max")
    ap.add_argument("--no-compact", action="store_true", help="query the files as ingested")
    args = parse_args(ap, sizes=[2_000, 4_000], queries=20)
    results = {}
    props = {} if args.rowgroup_rows is None else {"sleeper.table.parquet.rowgroup.rows.max": str(args.rowgroup_rows)}
    with bench_sleeper(args.state_store) as (s, _):
        print(f"query latency (ms) of Table.query, state store {args.state_store}, row groups of "
              f"{props.get('sleeper.table.parquet.rowgroup.rows.max', 'the default')} rows")
        for size in args.sizes:
            results[size] = run(s, size, args.queries, props, not args.no_compact)
            for kind, p in results[size].items():
                print(f"  {size:>12,} rows  {kind:<5}  p50 {p['p50']:6.2f}  p95 {p['p95']:6.2f}  p99 {p['p99']:6.2f}")
    small, large = args.sizes[0], args.sizes[-1]
    for kind in ("exact", "range"):
        print(f"  {kind} p50 ratio {large:,} / {small:,} rows: "
              f"{results[large][kind]['p50'] / results[small][kind]['p50']:.2f}")
    print("  goals: exact-key p50 <= 1 ms, p95 <= 3 ms; range p50 <= 3 ms; p50 ratio 100 M / 1 M rows <= 1.3")


if __name__ == "__main__":
    main()
