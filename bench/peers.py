"""Loads, exact-key lookups and range queries against delta-rs and Lance on the same data:
the reference for every claim against a peer (issue 24).

The workload: 2 M rows of Sleeper's system-test schema (string key, long sort key, two
string values; :mod:`sleeper_ops.demo`) written once as 10 Parquet files; each run loads
them as 10 appends into each system (loading is measured in every run), runs each
system's own maintenance, then the same queries: exact keys drawn from the rows (so each
exists) and ranges of about 1,000 rows, each timed alone after a few warm-up queries.

Every layout each peer documents for such lookups is measured, and the best method of
each peer is compared with ours:

* **ours**: a table of 16 leaf partitions over the embedded PostgreSQL (``--state-store
  memory`` for none), each append one ``Table.ingest``, then ``Table.compact()`` until
  every leaf has one file (2,048-row groups: ``sleeper.table.parquet.rowgroup.rows.max``'s
  default); queried through one ``Table.query_runner()`` (native) and as SQL through
  ``Sleeper.sql``;
* **delta-rs** 1.6.6: z-ordered on ``key`` at its default row group size and at ours,
  queried as SQL through ``QueryBuilder`` (its query API);
* **Lance** 14.0.2 (pylance): compacted with a BTREE index on ``key``, and rewritten in key
  order with a BTREE index; each queried with ``to_table(filter=...)`` (native) and as SQL
  through ``dataset.sql`` (DataFusion over Lance).

How each peer is configured, with the documentation followed, is in
``bench/_peers_child.py``'s docstring. The thread settings of every system are printed.

Every result is checked by content: per query, a hash of its rows sorted
(``_rows.rows_digest``), from every system, method and run, against ours. A mismatch is
printed, no ratios are printed, and the bench exits 1.

``--runs`` (3) interleaves the systems (ours, delta-rs, Lance, ours, ...); every figure is
the median over the runs with the spread (min-max), and every ratio is computed within
one run (peer / ours), then its median and spread printed.

The peers never enter the project's venv: the first run creates ``bench/.peers-venv``
(git-ignored) with ``deltalake==1.6.6`` and ``pylance==14.0.2`` (about 20 s), and each
peer runs there in a subprocess (``bench/_peers_child.py``) reading the same input files.
A run takes about 8 minutes on 2 cores (3 runs of 2 M rows)::

    .venv/bin/python bench/peers.py [--rows 2000000] [--appends 10] [--queries 300] [--runs 3]
                                    [--state-store postgres|memory] [--peers-venv DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (sets sys.path)
import pyarrow as pa
import pyarrow.parquet as pq
from _common import bench_sleeper, parse_args
from _peers_report import report
from _rows import sql_queries, timed_queries

from sleeper_ops.demo import KEY_SPACE, SYSTEM_TEST_SCHEMA, generate_rows, split_points
from sleeper_ops.io.memory_pool import environment_without_our_choice
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


def ours(s: Any, home: Path, work: Path, q: dict[str, Any], run: int) -> list[dict[str, Any]]:
    """Ours loaded, compacted and queried natively and through ``Sleeper.sql``, in a new table."""
    name = f"peers{run}"
    t = s.create_table(name, SYSTEM_TEST_SCHEMA, split_points=split_points(15),
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
    names = {Path(r.filename).name for r in t.state().references.values()}
    groups = [md.row_group(i).num_rows for md in (pq.ParquetFile(p).metadata for p in home.rglob("*.parquet")
                                                   if p.name in names)
              for i in range(md.num_row_groups)]
    common = {"system": "ours", "loads": loads, "maintain": maintain, "files": len(names),
              "group_rows": sorted(groups)[len(groups) // 2] if groups else 0}
    runner = t.query_runner()
    try:
        native = {"exact": timed_queries(q["keys"], WARMUP, lambda k: runner.query([exact_key_region(t.schema, [k])])),
                  "range": timed_queries(q["ranges"], WARMUP,
                                         lambda r: runner.query([range_region(t.schema, r[0], r[1])]))}
    finally:
        runner.close()

    by_sql = sql_queries(q, WARMUP, lambda where: s.sql(f"SELECT * FROM {name} WHERE {where}"))
    return [{**common, "method": "query runner", "api": "native", **native},
            {**common, "method": "Sleeper.sql", "api": "SQL", **by_sql}]


def peer(python: Path, work: Path, name: str, run: int) -> list[dict[str, Any]]:
    # the peer at its libraries' defaults: without the Arrow memory pool our import chose
    # (ADR 0012), unless the user set one for the whole bench
    out = subprocess.run([str(python), str(HERE / "_peers_child.py"), str(work), name, str(run)],
                         capture_output=True, text=True, env=environment_without_our_choice(dict(os.environ)))
    if out.returncode != 0:
        sys.exit(f"{name} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def our_threads() -> dict[str, Any]:
    from datafusion import SessionConfig, SessionContext

    ctx = SessionContext(SessionConfig().with_information_schema(True))  # as sleeper_ops.query.sql builds it
    partitions = ctx.sql("SHOW datafusion.execution.target_partitions").to_arrow_table().column(1)[0].as_py()
    return {"pyarrow cpu_count": pa.cpu_count(), "pyarrow io_thread_count": pa.io_thread_count(),
            "pyarrow memory pool": pa.default_memory_pool().backend_name,
            "Sleeper.sql DataFusion target_partitions": partitions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--appends", type=int, default=10)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--state-store", default="postgres", choices=["postgres", "memory"])
    ap.add_argument("--peers-venv", type=Path, default=HERE / ".peers-venv")
    args = parse_args(ap, rows=4_000, appends=2, queries=10, runs=2)
    # smoke: ours only; the peers' venv would be built (deltalake, pylance from PyPI) on a first run
    python = None if args.smoke else peers_python(args.peers_venv)
    threads = {"ours (project venv)": our_threads()}
    if python is not None:
        threads["peers (bench/.peers-venv)"] = peer(python, Path("."), "threads", 0)[0]
    with tempfile.TemporaryDirectory(prefix="sleeper-peers-") as d:
        work = Path(d)
        t0 = time.perf_counter()
        q = write_inputs(work, args.rows, args.appends, args.queries)
        print(f"inputs: {args.rows:,} rows in {args.appends} Parquet files ({time.perf_counter() - t0:.1f}s)",
              flush=True)
        results: list[dict[str, Any]] = []
        loads = [os.getloadavg()[0]]  # other work on the machine slows every figure: show how much there was
        with bench_sleeper(args.state_store) as (s, home):
            for run in range(args.runs):
                results += [{**r, "run": run} for r in ours(s, home, work, q, run)]
                loads.append(os.getloadavg()[0])
                print(f"run {run + 1}: ours done (state store {args.state_store}; load average {loads[-1]:.1f})",
                      flush=True)
                if python is None:
                    continue
                for name in ("delta", "lance"):
                    results += [{**r, "run": run} for r in peer(python, work, name, run)]
                    loads.append(os.getloadavg()[0])
                    print(f"run {run + 1}: {name} done (load average {loads[-1]:.1f})", flush=True)
        if python is None:
            print("peers skipped (--smoke)", flush=True)
    print(f"machine: {os.cpu_count()} cores; 1-minute load average {min(loads):.1f}–{max(loads):.1f} during the runs "
          "(above the core count, other processes shared the cores)")
    sys.exit(report(results, threads, args.rows, args.appends, args.runs))


if __name__ == "__main__":
    main()
