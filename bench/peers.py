"""Key lookups and loads against delta-rs and Lance on the same data, in one run.

The workload (issue 12): 2 M rows of Sleeper's system-test schema (string key, long sort
key, two string values; :mod:`sleeper_ops.demo`) written once as 10 Parquet files, then
loaded as 10 appends into each system, then each system's own maintenance:

* **ours**: a table of 16 leaf partitions over the embedded PostgreSQL (``--state-store
  memory`` for none), each append one ``Table.ingest``, then ``Table.compact()`` until
  every leaf has one file; queries through one ``Table.query_runner()``;
* **delta-rs** 1.6.6: ``write_deltalake(mode="append")``, then
  ``optimize.z_order(["key"])`` with 100,000-row row groups; queries as SQL through
  ``QueryBuilder``;
* **Lance** 14.0.2 (pylance): ``write_dataset`` (``create``, then ``append``), then
  ``optimize.compact_files()`` and a BTREE scalar index on ``key``; queries as
  ``to_table(filter=...)``.

Every system answers the same queries: exact keys drawn from the rows (so each exists)
and ranges of about 1,000 rows; each query is timed alone, after a few warm-up
queries. Load rows/s counts reading the input file too. The run checks that every
system returned the same number of rows for every query, and prints p50/p95 per system
and each peer's figures as ratios to ours.

The peers never enter the project's venv: the first run creates ``bench/.peers-venv``
(git-ignored) with ``deltalake==1.6.6`` and ``pylance==14.0.2`` (about 20 s), and the
peers run there in a subprocess (``bench/_peers_child.py``) reading the same input
files. A run takes 2-4 minutes on 2 cores::

    .venv/bin/python bench/peers.py [--rows 2000000] [--appends 10] [--queries 300]
                                    [--state-store postgres|memory] [--peers-venv DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (sets sys.path)
import pyarrow.parquet as pq
from _common import bench_sleeper, parse_args, percentiles

from sleeper_ops.demo import KEY_SPACE, SYSTEM_TEST_SCHEMA, generate_rows, split_points
from sleeper_ops.query.runner import exact_key_region, range_region

HERE = Path(__file__).resolve().parent
PINS = ("deltalake==1.6.6", "pylance==14.0.2")
WARMUP = 10


def peers_python(venv: Path) -> Path:
    """The Python of ``venv``, created with :data:`PINS` installed unless it already has them."""
    python, stamp = venv / "bin" / "python", venv / "pins.txt"
    if python.exists() and stamp.exists() and stamp.read_text().split() == list(PINS):
        return python
    print(f"creating {venv} with {' '.join(PINS)} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PINS],
                   check=True)
    stamp.write_text("\n".join(PINS) + "\n")
    return python


def write_inputs(work: Path, rows: int, appends: int, queries: int) -> dict[str, Any]:
    """The appends as Parquet files under ``work/inputs`` and the queries every system runs."""
    (work / "inputs").mkdir(parents=True)
    rng = random.Random(12)
    keys: list[str] = []
    per = rows // appends
    for i in range(appends):
        data = generate_rows(per if i < appends - 1 else rows - per * (appends - 1), seed=1000 + i)
        pq.write_table(data, work / "inputs" / f"append-{i:03d}.parquet")
        col = data.column("key")
        keys += [col[j].as_py() for j in rng.sample(range(data.num_rows), queries)]
    width = KEY_SPACE * 1000 // rows  # about 1,000 rows of uniformly random keys
    los = [rng.randrange(0, KEY_SPACE - width) for _ in range(queries)]
    q = {"keys": rng.sample(keys, queries), "warmup": WARMUP,
         "ranges": [[f"key-{lo:09d}", f"key-{lo + width:09d}"] for lo in los]}
    (work / "queries.json").write_text(json.dumps(q))
    return q


def ours(s: Any, work: Path, q: dict[str, Any]) -> dict[str, Any]:
    t = s.create_table("peers", SYSTEM_TEST_SCHEMA, split_points=split_points(15),
                       properties={"sleeper.table.compaction.strategy": "basic"})  # all of a leaf's files at once
    loads = []
    for f in sorted((work / "inputs").glob("*.parquet")):
        t0 = time.perf_counter()
        t.ingest([str(f)])
        loads.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(3):
        t.compact(runner="local")
        per_leaf = Counter(r.partition_id for r in t.state().references.values())
        if max(per_leaf.values()) == 1:
            break
    maintain = time.perf_counter() - t0
    assert max(per_leaf.values()) == 1, f"compaction left {per_leaf}"
    files = len(t.state().references)
    runner = t.query_runner()
    try:
        def timed(items: list[Any], region: Any) -> tuple[list[float], list[int]]:
            for x in items[:WARMUP]:
                runner.query([region(x)])
            ms, n = [], []
            for x in items:
                t0 = time.perf_counter()
                n.append(runner.query([region(x)]).num_rows)
                ms.append((time.perf_counter() - t0) * 1000)
            return ms, n

        exact = timed(q["keys"], lambda k: exact_key_region(t.schema, [k]))
        ranged = timed(q["ranges"], lambda r: range_region(t.schema, r[0], r[1]))
    finally:
        runner.close()
    return {"system": "ours", "loads": loads, "maintain": maintain, "files": files, "exact": exact, "range": ranged}


def summary(r: dict[str, Any], rows: int) -> dict[str, float]:
    e, g = percentiles(r["exact"][0]), percentiles(r["range"][0])
    return {"exact p50": e["p50"], "exact p95": e["p95"], "range p50": g["p50"], "range p95": g["p95"],
            "load rows/s": rows / sum(r["loads"]), "maintain s": r["maintain"]}


def report(results: list[dict[str, Any]], rows: int, appends: int) -> None:
    base = results[0]
    for r in results[1:]:
        for kind in ("exact", "range"):
            if r[kind][1] != base[kind][1]:
                bad = sum(a != b for a, b in zip(r[kind][1], base[kind][1]))
                print(f"  WARNING: {r['system']} returned other row counts than ours for {bad} {kind} queries")
    figures = {r["system"]: summary(r, rows) for r in results}
    print(f"\n{rows:,} rows in {appends} appends; {len(base['exact'][0])} exact-key and "
          f"{len(base['range'][0])} range queries per system (~{sum(base['range'][1]) / len(base['range'][1]):,.0f}"
          f" rows per range); latency in ms")
    cols = ["exact p50", "exact p95", "range p50", "range p95", "load rows/s", "maintain s"]
    print("| system | files | " + " | ".join(cols) + " |")
    print("|---|---:|" + "---:|" * len(cols))
    for r in results:
        f = figures[r["system"]]
        cells = [f"{f[c]:,.0f}" if c == "load rows/s" else f"{f[c]:.1f}" if c == "maintain s" else f"{f[c]:.2f}"
                 for c in cols]
        print(f"| {r['system']} | {r['files']} | " + " | ".join(cells) + " |")
    print("\nratios, peer / ours (latency and maintenance: > 1 means ours is faster; load rows/s: > 1 means "
          "the peer loads faster)")
    print("| system | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    ours_f = figures[base["system"]]
    for r in results[1:]:
        f = figures[r["system"]]
        print(f"| {r['system']} | " + " | ".join(f"{f[c] / ours_f[c]:.2f}" for c in cols) + " |")
    print("goals (issue 12): ours exact-key p50 <= 1 ms, p95 <= 3 ms, range p50 <= 3 ms, all ahead of both peers")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--appends", type=int, default=10)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--state-store", default="postgres", choices=["postgres", "memory"])
    ap.add_argument("--peers-venv", type=Path, default=HERE / ".peers-venv")
    args = parse_args(ap, rows=4_000, appends=2, queries=10)
    # smoke: ours only; the peers' venv would be built (deltalake, pylance from PyPI) on a first run
    python = None if args.smoke else peers_python(args.peers_venv)
    with tempfile.TemporaryDirectory(prefix="sleeper-peers-") as d:
        work = Path(d)
        t0 = time.perf_counter()
        q = write_inputs(work, args.rows, args.appends, args.queries)
        print(f"inputs: {args.rows:,} rows in {args.appends} Parquet files ({time.perf_counter() - t0:.1f}s)",
              flush=True)
        results = []
        with bench_sleeper(args.state_store) as (s, _):
            results.append(ours(s, work, q))
        if python is None:
            print(f"ours done (state store {args.state_store}); peers skipped (--smoke)", flush=True)
        else:
            print(f"ours done (state store {args.state_store}); peers in {python.parent.parent.name} ...", flush=True)
            out = subprocess.run([str(python), str(HERE / "_peers_child.py"), str(work)], check=True,
                                 capture_output=True, text=True)
            results += [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    report(results, args.rows, args.appends)


if __name__ == "__main__":
    main()
