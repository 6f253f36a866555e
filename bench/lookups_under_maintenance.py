"""Key lookups while maintenance runs on the same cores, with maintenance at nice 0 and at
the table's ``sleeper.table.maintenance.nice``: what lowering it buys the lookups and
costs the maintenance (ADR 0023).

One table of the system-test schema (``--rows`` rows in 8 leaves, compacted to one file a
leaf, in-memory state store, local disk) answers exact-key lookups through one
``Table.query_runner()`` in this process: keys drawn from the rows, one every
``--gap-ms`` (requests arriving spaced, as a service's do), each checked by content
against the generated rows. Beside it, a second process does what the compaction DAG's
task does, over and over, on a table of its own: it lowers itself as a task does
(:func:`~sleeper_ops.maintenance.priority.yield_cpu_for_maintenance`), ingests 4 files of
``--churn-rows`` rows and compacts them with the local runner (DataFusion, both cores),
then garbage-collects; it counts the rows it compacted.

Each run times three legs: **quiet** (no maintenance) first, then **nice 0** (maintenance
at the worker's priority, as before this setting) and **nice N** (``--nice``, 10 by
default), these two taking turns to go first. Per leg: lookup p50 and p99 and the
maintenance's compacted rows per second. Each figure is the median over ``--runs`` runs
with the spread; the ratios (nice N over nice 0) are taken within each run::

    .venv/bin/python bench/lookups_under_maintenance.py [--rows 2000000] [--lookups 1000]
        [--gap-ms 2] [--churn-rows 500000] [--nice 10] [--warmup 3] [--runs 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from typing import Any

import _common  # noqa: F401  (sets sys.path)
from _common import parse_args, percentiles, spread

from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points


def churn(nice: int, rows: int, compacted: Any, ready: Any, stop: Any) -> None:
    """The maintenance process: lower itself to ``nice`` as a task does, then ingest and
    compact until ``stop``; ``compacted`` counts the rows its compactions read."""
    from sleeper_ops.api import Sleeper
    from sleeper_ops.io.storage import ObjectStore
    from sleeper_ops.maintenance.priority import yield_cpu_for_maintenance
    from statestore.memory import InMemoryStateStore

    with tempfile.TemporaryDirectory(prefix="sleeper-churn-") as d:
        s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(f"{d}/data"))
        t = s.create_table("churn", SYSTEM_TEST_SCHEMA, split_points=split_points(3),
                           properties={"sleeper.table.maintenance.nice": str(nice),
                                       "sleeper.table.compaction.strategy": "basic",
                                       "sleeper.table.gc.delay.minutes": "1"})
        yield_cpu_for_maintenance(t.info)
        batches = [generate_rows(rows, seed=500 + i) for i in range(4)]
        ready.set()
        while not stop.is_set():
            for b in batches:
                t.ingest(b)
            report = t.compact(runner="local")
            with compacted.get_lock():
                compacted.value += report.rows_read
            t.gc(now_ms=int(time.time() * 1000) + 3_600_000)  # what the compaction replaced


def leg(runner: Any, schema: Any, keys: list[str], expected: dict[str, int], nice: Any, args: argparse.Namespace
        ) -> dict[str, Any]:
    """Lookups of ``keys`` with maintenance at ``nice`` beside them (None: no maintenance)."""
    from sleeper_ops.query.runner import exact_key_region

    ctx = multiprocessing.get_context("spawn")
    stop, ready, compacted = ctx.Event(), ctx.Event(), ctx.Value("q", 0)
    proc = None
    if nice is not None:
        proc = ctx.Process(target=churn, args=(nice, args.churn_rows, compacted, ready, stop), daemon=True)
        proc.start()
        ready.wait(120)
        time.sleep(args.warmup)  # ingesting and compacting by the time lookups start
    start_rows, t0 = compacted.value, time.perf_counter()
    times = []
    try:
        for k in keys:
            q0 = time.perf_counter()
            got = runner.query([exact_key_region(schema, [k])])
            times.append(time.perf_counter() - q0)
            found = got.column("key").to_pylist()
            if found != [k] * expected[k]:
                raise SystemExit(f"lookup of {k!r}: {len(found)} rows, expected {expected[k]}")
            time.sleep(args.gap_ms / 1000)
        elapsed = time.perf_counter() - t0
        rows_per_s = (compacted.value - start_rows) / elapsed
    finally:
        stop.set()
        if proc is not None:
            proc.join(60)
            if proc.is_alive():
                proc.kill()
    p = percentiles(times)
    return {"p50": p["p50"] * 1000, "p99": p["p99"] * 1000, "compacted_rows_s": rows_per_s,
            "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--lookups", type=int, default=1000)
    ap.add_argument("--gap-ms", type=float, default=2.0, help="pause between two lookups")
    ap.add_argument("--churn-rows", type=int, default=500_000, help="rows of each of the maintenance's 4 files")
    ap.add_argument("--nice", type=int, default=10, help="the maintenance table's sleeper.table.maintenance.nice")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds the maintenance runs before the lookups")
    ap.add_argument("--runs", type=int, default=3)
    args = parse_args(ap, rows=20_000, lookups=30, churn_rows=5_000, runs=1, warmup=0.2)
    from sleeper_ops.api import Sleeper
    from sleeper_ops.io.storage import ObjectStore
    from statestore.memory import InMemoryStateStore

    legs = {"quiet": None, "nice 0": 0, f"nice {args.nice}": args.nice}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in legs}
    with tempfile.TemporaryDirectory(prefix="sleeper-lum-") as d:
        s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(f"{d}/data"))
        t = s.create_table("served", SYSTEM_TEST_SCHEMA, split_points=split_points(7))
        expected: dict[str, int] = {}
        data = generate_rows(args.rows, seed=11)
        for k in data.column("key").to_pylist():
            expected[k] = expected.get(k, 0) + 1
        t.ingest(data)
        t.compact(runner="local")
        keys = list(expected)[:: max(1, len(expected) // args.lookups)][: args.lookups]
        print(f"lookups under maintenance: {args.rows:,} rows in 8 leaves, one file each; {len(keys):,} exact-key "
              f"lookups a leg, one every {args.gap_ms:g} ms, checked by content; maintenance: 4 x "
              f"{args.churn_rows:,} rows ingested and compacted, over and over; {os.cpu_count()} cores", flush=True)
        runner = t.query_runner()
        try:
            for run in range(args.runs):
                names = list(legs)
                order = [names[0]] + (names[1:] if run % 2 == 0 else names[:0:-1])  # the two take turns going first
                for name in order:
                    nice = legs[name]
                    results[name].append(leg(runner, t.schema, keys, expected, nice, args))
                    r = results[name][-1]
                    print(f"  run {run + 1} {name:<8} p50 {r['p50']:.2f} ms  p99 {r['p99']:.2f} ms  "
                          f"maintenance {r['compacted_rows_s']:,.0f} rows/s  load {r['load']:.1f}", flush=True)
        finally:
            runner.close()
    print(f"{'leg':<10}{'p50 ms':>22}{'p99 ms':>22}{'maintenance M rows/s':>26}")
    for name in legs:
        rs = results[name]
        print(f"{name:<10}{spread([r['p50'] for r in rs]):>22}{spread([r['p99'] for r in rs]):>22}"
              f"{spread([r['compacted_rows_s'] / 1e6 for r in rs]):>26}")
    low, base = results[f"nice {args.nice}"], results["nice 0"]
    ratio = {k: [a[k] / b[k] if b[k] else float("nan") for a, b in zip(low, base)]
             for k in ("p50", "p99", "compacted_rows_s")}
    print(f"ratio nice {args.nice} / nice 0 (each run): p50 {spread(ratio['p50'])}  p99 {spread(ratio['p99'])}  "
          f"maintenance rows/s {spread(ratio['compacted_rows_s'])}")
    quiet = [b["p99"] / q["p99"] for b, q in zip(base, results["quiet"])]
    print(f"ratio nice 0 / quiet (each run): p99 {spread(quiet)}")


if __name__ == "__main__":
    main()
