"""Exact-key query latency as the number of leaf partitions and file references grows.

For each leaf count N, a table of Sleeper's system-test schema gets N leaves and 3 file
references per leaf: three real data files (``--rows`` rows each, written by ingest into
a one-leaf scratch table) are each referenced from every leaf, as after a push-down, in
one AddFiles commit. So only the metadata grows with N; the bytes a lookup reads
(each file's rows of one leaf) shrink a little. An exact-key query asks for a key known
to exist. Timed, in one run on the same state store:

* ``Table.query`` -- the API path (CLI and REST take it too);
* ``QueryRunner.query`` on a runner kept across queries;
* planning alone (``QueryRunner._tasks``: the metadata refresh and the choice of
  references, no file read), the part that must not grow with the table;
* ``load_state`` -- the whole-state read every query paid before the incremental
  metadata copy (the baseline, measured in this run).

The figure of merit is the ratio of the largest N's exact-key p50 to the smallest's
(goal <= 1.3: a lookup's metadata cost does not grow with the table).

    .venv/bin/python bench/query_leaves.py [--leaves 100 10000] [--queries 300] [--rows 20000]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any, Callable

import _common  # noqa: F401
from _common import bench_sleeper, parse_args, percentiles

from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points
from sleeper_ops.query.runner import exact_key_region
from statestore.files import FileReference
from statestore.transactions import AddFiles

REFS_PER_LEAF = 3


def build(s: Any, leaves: int, rows: int) -> tuple[Any, list[str]]:
    scratch = s.create_table(f"files{leaves}", SYSTEM_TEST_SCHEMA)
    keys: list[str] = []
    for i in range(REFS_PER_LEAF):
        data = generate_rows(rows, seed=1000 * leaves + i)
        keys.extend(data.column("key").take(list(range(0, rows, max(1, rows // 300)))).to_pylist())
        scratch.ingest(data)
    files = sorted({r.filename for r in s.state_store.file_references(scratch.info.table_id)})
    t = s.create_table(f"l{leaves}", SYSTEM_TEST_SCHEMA, split_points=split_points(leaves - 1))
    ids = [p.id for p in s.state_store.partitions(t.info.table_id) if p.is_leaf]
    refs = tuple(FileReference(f, pid, max(1, rows // leaves), count_approximate=True, whole_file=False)
                 for pid in ids for f in files)
    s.state_store.commit(t.info.table_id, AddFiles(refs))
    return t, keys


def timed(fn: Callable[[], Any], n: int) -> dict[str, float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return percentiles(out)


def run(s: Any, leaves: int, queries: int, rows: int) -> dict[str, dict[str, float]]:
    t0 = time.perf_counter()
    t, keys = build(s, leaves, rows)
    print(f"  built {leaves:,} leaves, {leaves * REFS_PER_LEAF:,} references in {time.perf_counter() - t0:.1f}s")
    rng = random.Random(leaves)

    def api() -> None:
        assert t.query(keys=[rng.choice(keys)]).num_rows >= 1

    runner = t.query_runner()

    def reused() -> None:
        assert runner.query([exact_key_region(t.schema, [rng.choice(keys)])]).num_rows >= 1

    def plan() -> None:
        assert runner._tasks([exact_key_region(t.schema, [rng.choice(keys)])])

    def load() -> None:
        s.state_store.load_state(t.info.table_id)

    for _ in range(10):  # warm footers, connections and the metadata copy
        api()
        reused()
    out = {"Table.query": timed(api, queries), "runner.query": timed(reused, queries),
           "plan": timed(plan, queries), "load_state": timed(load, max(5, queries // 10))}
    runner.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--leaves", type=int, nargs="+", default=[100, 10_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rows", type=int, default=20_000, help="rows of each of the 3 data files")
    ap.add_argument("--state-store", default="postgres", choices=["postgres", "memory"])
    args = parse_args(ap, leaves=[4, 16], queries=20, rows=1_000)
    results = {}
    with bench_sleeper(args.state_store) as (s, _):
        print(f"exact-key latency (ms) by leaf count, state store {args.state_store}")
        for n in args.leaves:
            results[n] = run(s, n, args.queries, args.rows)
            for kind, p in results[n].items():
                print(f"  {n:>7,} leaves  {kind:<13} p50 {p['p50']:8.2f}  p95 {p['p95']:8.2f}  p99 {p['p99']:8.2f}")
    small, large = args.leaves[0], args.leaves[-1]
    for kind in results[small]:
        print(f"  {kind:<13} p50 ratio {large:,} / {small:,} leaves: "
              f"{results[large][kind]['p50'] / results[small][kind]['p50']:.2f}")
    print("  goal: Table.query p50 ratio 10,000 / 100 leaves <= 1.3")


if __name__ == "__main__":
    main()
