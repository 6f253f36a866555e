"""Latency of small ingests (as REST ``POST records`` makes them) on PostgreSQL, against a
baseline taken in the same run: a plain pyarrow write of the same rows to a local
Parquet file plus one ``SELECT 1`` round trip to the same server.

A small ingest is a job: it names its output in its job record, writes one sorted file
per leaf, checks it exists and commits it with the job's record and a commit id, so
its cost is dominated by round trips to the state store. Not a pass/fail test.

    .venv/bin/python bench/small_ingest.py [--rows 100] [--count 300]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import _common  # noqa: F401  (sets sys.path)
import pyarrow as pa
import pyarrow.parquet as pq
from _common import bench_sleeper, parse_args, percentiles

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--count", type=int, default=300)
    args = parse_args(ap, rows=10, count=10)
    with bench_sleeper("postgres") as (s, home):
        t = s.create_table("t", SCHEMA)
        batches = [pa.table({"key": pa.array(range(i * args.rows, (i + 1) * args.rows), pa.int64()),
                             "v": [f"v{j}" for j in range(args.rows)]}) for i in range(args.count)]
        store = s.state_store
        base: list[float] = []
        with tempfile.TemporaryDirectory() as d:
            for i, b in enumerate(batches):
                start = time.perf_counter()
                pq.write_table(b, f"{d}/{i}.parquet", compression="zstd")
                store.get_table("t")  # one round trip to the same server
                base.append(time.perf_counter() - start)
        took: list[float] = []
        for b in batches:
            start = time.perf_counter()
            t.ingest(b)
            took.append(time.perf_counter() - start)
        b50, i50 = percentiles(base)["p50"], percentiles(took)["p50"]
        print(f"{args.count} ingests of {args.rows} rows on PostgreSQL")
        print(f"  baseline (pyarrow write + one round trip) p50 {b50 * 1000:.2f} ms")
        p = percentiles(took)
        print(f"  ingest p50 {p['p50'] * 1000:.2f} ms, p95 {p['p95'] * 1000:.2f} ms, p99 {p['p99'] * 1000:.2f} ms"
              f"  (p50 ratio to baseline {i50 / b50:.2f})")
        assert sum(r.record_count for r in t.state().references.values()) == args.rows * args.count


if __name__ == "__main__":
    main()
