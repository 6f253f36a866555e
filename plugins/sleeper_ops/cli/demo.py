"""The demo: the whole pipeline on the embedded default, with progress shown.

Creates a table of Sleeper's system-test schema (string key, long sort key, two
string values) with split points, generates and ingests the rows in several
batches, then keeps the LSM tree healthy the way the scheduled DAGs do: splits
the leaf partitions that grew past the threshold, compacts (pushing references
down to the new leaves and merging each leaf's files), and garbage-collects the
files compaction replaced, printing the reports after each step. Exact-key and
range queries run before and after maintenance.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from rich.console import Console

from sleeper_ops.api import Sleeper
from sleeper_ops.cli.support import record_progress
from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points
from sleeper_ops.reports import render_files, render_jobs, render_partitions
from statestore.errors import TableNotFoundError


def _queries(console: Console, table: Any, keys: list[str]) -> None:
    from sleeper_ops.query.runner import exact_key_region, range_region

    runner = table.query_runner()
    try:
        for key in keys[:3]:
            t0 = time.perf_counter()
            res = runner.query([exact_key_region(table.schema, [key])])
            console.print(f"query key={key!r}: {res.num_rows} records in {1000 * (time.perf_counter() - t0):.1f} ms")
        for lo, hi in (("key-100000000", "key-100100000"), ("key-500000000", "key-501000000")):
            t0 = time.perf_counter()
            res = runner.query([range_region(table.schema, lo, hi)])
            console.print(f"query range [{lo!r}, {hi!r}): {res.num_rows:,} records in "
                          f"{1000 * (time.perf_counter() - t0):.1f} ms")
    finally:
        runner.close()


def _report(console: Console, title: str, text: str) -> None:
    console.rule(title)
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def run_demo(sleeper: Sleeper, *, rows: int, batches: int, table_name: str, work_dir: Path) -> None:
    console = Console()
    try:
        sleeper.delete_table(table_name)
        console.print(f"removed the previous [bold]{table_name}[/] table")
    except TableNotFoundError:
        pass
    # Leaves split once they hold more than a tenth of the data, so the demo shows a
    # split; GC, whose delay has a floor of a minute, runs as it will once that has passed.
    threshold = max(1, rows // 10)
    table = sleeper.create_table(table_name, SYSTEM_TEST_SCHEMA, split_points=split_points(7), properties={
        "sleeper.table.partition.splitting.threshold": str(threshold),
        "sleeper.table.gc.delay.minutes": "1"})
    console.rule(f"created table {table_name}: 8 leaf partitions, split threshold {threshold:,} records")

    work_dir.mkdir(parents=True, exist_ok=True)
    per_batch = max(1, rows // batches)
    remembered: list[str] = []
    started = time.perf_counter()
    total = 0
    for b in range(batches):
        n = per_batch if b < batches - 1 else rows - per_batch * (batches - 1)
        data = generate_rows(n, seed=b)
        remembered.append(data.column("key")[n // 2].as_py())
        path = work_dir / f"batch-{b:03d}.parquet"
        pq.write_table(data, path)
        with record_progress(f"ingest batch {b + 1}/{batches}", total=n) as progress:
            r = table.ingest([str(path)], progress=progress)
        total += r.records
        console.print(f"  batch {b + 1}: {r.records:,} records -> {len(r.files)} files in {r.seconds:.2f}s "
                      f"({r.rows_per_second:,.0f} records/s)")
    shutil.rmtree(work_dir, ignore_errors=True)
    elapsed = time.perf_counter() - started
    console.rule(f"ingested {total:,} records in {elapsed:.1f}s")
    _queries(console, table, remembered)
    _report(console, "partitions after ingest", render_partitions(table.state()))

    split = table.split(run_id="demo")
    _report(console, "split", split.summary() + "\n" + render_partitions(table.state()))

    records = sum(r.record_count for r in table.state().references.values())
    with record_progress("compaction", total=records) as progress:
        report = table.compact(progress=progress, run_id="demo")
    _report(console, "compaction", report.summary())
    _report(console, "files after compaction", render_files(table.state()))
    _report(console, "jobs (newest 20)", render_jobs(table.jobs(limit=20)))

    gc = table.gc(now_ms=int(time.time() * 1000) + 61_000)
    _report(console, "garbage collection (as it runs once the 1-minute GC delay has passed)",
            gc.summary() + "\n" + render_files(table.state()))
    _report(console, "partitions after maintenance", render_partitions(table.state()))
    _queries(console, table, remembered)
