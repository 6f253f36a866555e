"""The demo: the whole pipeline on the embedded default, with progress shown.

Creates a table of Sleeper's system-test schema (string key, long sort key, two
string values) with split points, generates and ingests the rows in several
batches, runs exact-key and range queries, and prints the partition and file
reports.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console

from sleeper_ops.api import Sleeper
from sleeper_ops.cli_support import record_progress
from sleeper_ops.report import render_files, render_partitions
from statestore.errors import TableNotFoundError

SYSTEM_TEST_SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "StringType"}],
    "sortKeyFields": [{"name": "timestamp", "type": "LongType"}],
    "valueFields": [{"name": "value1", "type": "StringType"}, {"name": "value2", "type": "StringType"}],
}
KEY_SPACE = 10**9


def key_strings(ints: np.ndarray) -> pa.Array:
    """``key-000000042``-style keys, vectorised."""
    digits = pc.utf8_lpad(pc.cast(pa.array(ints), pa.string()), width=9, padding="0")
    return pc.binary_join_element_wise("key-", digits, "")


def generate_rows(n: int, seed: int) -> pa.Table:
    """``n`` rows of the system-test schema with uniformly random keys."""
    rng = np.random.default_rng(seed)
    ints = rng.integers(0, KEY_SPACE, n)
    v = rng.integers(0, 10**12, n)
    return pa.table({
        "key": key_strings(ints),
        "timestamp": pa.array(rng.integers(0, 2**40, n), pa.int64()),
        "value1": pc.binary_join_element_wise("value1-", pc.cast(pa.array(v), pa.string()), ""),
        "value2": pc.binary_join_element_wise("value2-", pc.cast(pa.array(v * 7 % 10**12), pa.string()), ""),
    })


def split_points(count: int) -> list[str]:
    step = KEY_SPACE // (count + 1)
    return [f"key-{i * step:09d}" for i in range(1, count + 1)]


def run_demo(sleeper: Sleeper, *, rows: int, batches: int, table_name: str, work_dir: Path) -> None:
    console = Console()
    try:
        sleeper.delete_table(table_name)
        console.print(f"removed the previous [bold]{table_name}[/] table")
    except TableNotFoundError:
        pass
    table = sleeper.create_table(table_name, SYSTEM_TEST_SCHEMA, split_points=split_points(7))
    console.rule(f"created table {table_name}: 8 leaf partitions")

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

    runner = table.query_runner()
    from sleeper_ops.query import exact_key_region, range_region
    for key in remembered[:3]:
        t0 = time.perf_counter()
        res = runner.query([exact_key_region(table.schema, [key])])
        console.print(f"query key={key!r}: {res.num_rows} records in {1000 * (time.perf_counter() - t0):.1f} ms")
    for lo, hi in (("key-100000000", "key-100100000"), ("key-500000000", "key-501000000")):
        t0 = time.perf_counter()
        res = runner.query([range_region(table.schema, lo, hi)])
        console.print(f"query range [{lo!r}, {hi!r}): {res.num_rows:,} records in "
                      f"{1000 * (time.perf_counter() - t0):.1f} ms")
    runner.close()

    state = table.state()
    console.rule("partitions")
    console.print(render_partitions(state), markup=False, highlight=False, soft_wrap=True)
    console.rule("files")
    console.print(render_files(state), markup=False, highlight=False, soft_wrap=True)
