"""The demo: the whole pipeline on the embedded default, in about 40 lines of output.

Creates a table of Sleeper's system-test schema (string key, long sort key, two
string values) with split points, generates and ingests the rows in several
batches, then keeps the LSM tree healthy the way the scheduled DAGs do: splits
the leaf partitions that grew past the threshold, compacts (pushing references
down to the new leaves and merging each leaf's files), and garbage-collects the
files compaction replaced, printing one summary per step. An exact-key and a range
query run before and after maintenance. It ends with the next commands to try.

The demo's table is marked with ``sleeper.table.created.by = sleeper demo``; a table
of the same name without that mark is the user's, and the demo refuses to touch it.
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
from sleeper_ops.demo import DEMO_MARK, SYSTEM_TEST_SCHEMA, generate_rows, split_points
from sleeper_ops.errors import ConfigError
from sleeper_ops.maintenance.gc import keep_unreferenced_ms
from sleeper_ops.reports import render_partitions
from statestore.clock import now_ms
from statestore.errors import TableNotFoundError
from statestore.properties import CREATED_BY, GC_DELAY_MINUTES, PARTITION_SPLITTING_THRESHOLD

#: The status page ``make airflow`` (``sleeper airflow``, port 8080) serves.
STATUS_PAGE = "http://127.0.0.1:8080/sleeper/ui/"


def _queries(console: Console, table: Any, key: str, when: str) -> None:
    from sleeper_ops.query.runner import exact_key_region, range_region

    runner = table.query_runner()
    try:
        t0 = time.perf_counter()
        res = runner.query([exact_key_region(table.schema, [key])])
        console.print(f"  {when}: key {key!r}: {res.num_rows} records in {1000 * (time.perf_counter() - t0):.1f} ms")
        lo, hi = "key-500000000", "key-501000000"
        t0 = time.perf_counter()
        res = runner.query([range_region(table.schema, lo, hi)])
        console.print(f"  {when}: range [{lo!r}, {hi!r}): {res.num_rows:,} records in "
                      f"{1000 * (time.perf_counter() - t0):.1f} ms")
    finally:
        runner.close()


def _step(console: Console, title: str, *lines: str) -> None:
    console.rule(title)
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _overview(table: Any) -> str:
    """The first line of the partitions report: partitions, leaves, references, records."""
    return render_partitions(table.state()).splitlines()[0]


def _replace_own_table(console: Console, sleeper: Sleeper, table_name: str) -> None:
    """Delete the demo's earlier table; refuse (ConfigError) a table of that name the demo did not create."""
    try:
        info = sleeper.table(table_name).info
    except TableNotFoundError:
        return
    if info.properties.get(CREATED_BY) != DEMO_MARK:
        raise ConfigError(f"table {table_name!r} exists and was not created by the demo, so the demo leaves it "
                          f"alone; run it on another table: sleeper demo --table demo2")
    sleeper.delete_table(table_name)
    console.print(f"removed the demo's previous [bold]{table_name}[/] table")


def run_demo(sleeper: Sleeper, *, rows: int, batches: int, table_name: str, work_dir: Path) -> None:
    console = Console()
    _replace_own_table(console, sleeper, table_name)
    # Leaves split once they hold more than a tenth of the data, so the demo shows a
    # split; GC runs as it will once the replaced files have waited their time.
    threshold = max(1, rows // 10)
    table = sleeper.create_table(table_name, SYSTEM_TEST_SCHEMA, split_points=split_points(7), properties={
        PARTITION_SPLITTING_THRESHOLD: str(threshold),
        GC_DELAY_MINUTES: "1", CREATED_BY: DEMO_MARK})
    console.rule(f"created table {table_name}: 8 leaf partitions, split threshold {threshold:,} records")

    work_dir.mkdir(parents=True, exist_ok=True)
    per_batch = max(1, rows // batches)
    started = time.perf_counter()
    total, key = 0, ""
    for b in range(batches):
        n = per_batch if b < batches - 1 else rows - per_batch * (batches - 1)
        data = generate_rows(n, seed=b)
        key = key or data.column("key")[n // 2].as_py()
        path = work_dir / f"batch-{b:03d}.parquet"
        pq.write_table(data, path)
        with record_progress(f"ingest batch {b + 1}/{batches}", total=n) as progress:
            r = table.ingest([str(path)], progress=progress)
        total += r.records
        console.print(f"  batch {b + 1}: {r.records:,} records -> {len(r.files)} files in {r.seconds:.2f}s "
                      f"({r.rows_per_second:,.0f} records/s)")
    shutil.rmtree(work_dir, ignore_errors=True)
    console.rule(f"ingested {total:,} records in {time.perf_counter() - started:.1f}s")
    console.print(f"  {_overview(table)}")
    _queries(console, table, key, "query")

    split = table.split(run_id="demo")
    _step(console, "split (the split DAG, every 10 minutes)", split.summary().splitlines()[0], _overview(table))

    records = sum(r.record_count for r in table.state().references.values())
    with record_progress("compaction", total=records) as progress:
        report = table.compact(progress=progress, run_id="demo")
    _step(console, "compaction (the compaction DAG, every 5 minutes)", *report.summary().splitlines()[:6])

    # as the GC DAG will once the replaced files have waited out the delay and the history
    # retention (every state within it stays readable as of, sleeper history)
    keep_ms = keep_unreferenced_ms(table.info)
    gc = table.gc(now_ms=now_ms() + keep_ms + 1_000)
    _step(console, f"garbage collection (the GC DAG, {keep_ms // 60_000} minutes later: the GC delay plus the "
                   "history retention)", gc.summary(), _overview(table))
    _queries(console, table, key, "query again")

    _step(console, "next", f"sleeper report partitions {table_name}        # the partition tree, leaf by leaf",
          f"sleeper sql \"SELECT count(*) FROM {table_name} WHERE key < 'key-1'\"   # SQL over the table",
          "make airflow                                # Airflow keeps the table from now on; status page: "
          f"{STATUS_PAGE}")
