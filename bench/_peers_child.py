"""The peers' side of ``bench/peers.py``: one peer loads, maintains and queries the same
Parquet inputs and queries as ours, in every layout the bench compares. Runs with the
peers' own venv's Python (``bench/.peers-venv``), never the project's: of the project it
imports only ``bench/_rows.py`` (pyarrow and the standard library).

    bench/.peers-venv/bin/python bench/_peers_child.py WORK_DIR delta|lance|threads RUN

``WORK_DIR`` holds ``inputs/*.parquet`` (the appends, loaded in name order) and
``queries.json`` (``keys``, ``ranges`` and ``warmup``); the peer writes its tables under
``WORK_DIR/RUN-<peer>/`` (a fresh directory per run, so every run loads) and prints one
JSON object per method on stdout: its load seconds (one per append, shared by the
methods of one peer), maintenance seconds, files, rows per row group, and per query the
milliseconds, row count and :func:`_rows.rows_digest`. ``threads`` prints the thread
settings the peers run with.

How each peer is configured, and the documentation followed:

* delta-rs: the appends with ``write_deltalake(mode="append")``; then
  ``DeltaTable.optimize.z_order(["key"])`` (TableOptimizer API,
  https://delta-io.github.io/delta-rs/latest/api/delta_table/delta_table_optimizer/),
  once with no ``WriterProperties`` (delta-rs's default row groups) and once with
  ``WriterProperties(max_row_group_size=2048)`` (ours' default,
  ``sleeper.table.parquet.rowgroup.rows.max``), each on its own copy of the loaded
  table; queried as SQL through ``QueryBuilder().register(...).execute(...)`` with the
  session defaults "deltalake tunes for Delta tables"
  (https://delta-io.github.io/delta-rs/latest/api/query/);
* Lance: the appends with ``lance.write_dataset`` (``create``, then ``append``); then
  (a) ``optimize.compact_files()`` and a BTREE scalar index on ``key``, and (b) the
  dataset rewritten in key order (read, ``sort_by("key")``, ``write_dataset``) with a
  BTREE index on ``key`` (BTREE for a string column of mostly distinct values, queried
  with ``=`` and ranges: https://lancedb.github.io/lancedb/guides/scalar_index); each
  layout queried with ``to_table(filter=...)`` and as SQL with ``dataset.sql(...)``
  (DataFusion over Lance); thread pools at their defaults (compute threads = cores, 8 IO
  threads for a local store: https://lancedb.github.io/lance/performance.html).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _rows import sql_queries  # bench/ is on sys.path: this runs as a script

OURS_ROW_GROUP_ROWS = 2048  # sleeper.table.parquet.rowgroup.rows.max's default (statestore/properties.py)


def _row_group_rows(files: list[str]) -> int:
    """The median rows per row group over the Parquet ``files``."""
    sizes = []
    for f in files:
        md = pq.ParquetFile(f.removeprefix("file://")).metadata
        sizes += [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    return int(statistics.median(sizes))


def delta(out: Path, inputs: list[Path], q: dict[str, Any]) -> list[dict[str, Any]]:
    from deltalake import DeltaTable, QueryBuilder, WriterProperties, write_deltalake

    loaded = str(out / "delta")
    loads = []
    for f in inputs:
        t0 = time.perf_counter()
        write_deltalake(loaded, pq.read_table(f), mode="append")
        loads.append(time.perf_counter() - t0)
    results = []
    for name, props in (("z-order, default row groups", None),
                        (f"z-order, {OURS_ROW_GROUP_ROWS:,}-row groups",
                         WriterProperties(max_row_group_size=OURS_ROW_GROUP_ROWS))):
        path = str(out / f"delta-{len(results)}")
        shutil.copytree(loaded, path)  # each layout from the same loaded table
        t0 = time.perf_counter()
        DeltaTable(path).optimize.z_order(["key"], writer_properties=props)
        maintain = time.perf_counter() - t0
        dt = DeltaTable(path)
        qb = QueryBuilder().register("t", dt)

        def sql(where: str, qb: Any = qb) -> pa.Table:
            return pa.table(qb.execute(f"SELECT * FROM t WHERE {where}").read_all())

        results.append({"system": "delta-rs", "method": name, "api": "SQL", "loads": loads, "maintain": maintain,
                        "files": len(dt.file_uris()), "group_rows": _row_group_rows(dt.file_uris()),
                        **sql_queries(q, q["warmup"], sql)})
    return results


def lance_(out: Path, inputs: list[Path], q: dict[str, Any]) -> list[dict[str, Any]]:
    import lance

    path = str(out / "lance")
    loads = []
    for i, f in enumerate(inputs):
        t0 = time.perf_counter()
        lance.write_dataset(pq.read_table(f), path, mode="create" if i == 0 else "append")
        loads.append(time.perf_counter() - t0)
    results = []

    def measure(name: str, ds: Any, maintain: float) -> None:
        def scan(where: str) -> pa.Table:
            return ds.to_table(filter=where)

        def sql(where: str) -> pa.Table:
            return ds.sql(f"SELECT * FROM dataset WHERE {where}").build().to_stream_reader().read_all()

        common = {"system": "Lance", "method": name, "loads": loads, "maintain": maintain,
                  "files": len(ds.get_fragments()), "group_rows": 1024}  # write_dataset's max_rows_per_group
        results.append({**common, "api": "native", **sql_queries(q, q["warmup"], scan)})
        results.append({**common, "api": "SQL", **sql_queries(q, q["warmup"], sql)})

    # (b) first: it reads the loaded dataset without changing it
    t0 = time.perf_counter()
    ordered = str(out / "lance-ordered")
    lance.write_dataset(lance.dataset(path).to_table().sort_by("key"), ordered)
    lance.dataset(ordered).create_scalar_index("key", "BTREE")
    maintain = time.perf_counter() - t0
    ordered_ds = lance.dataset(ordered)
    # (a)
    t0 = time.perf_counter()
    lance.dataset(path).optimize.compact_files()
    lance.dataset(path).create_scalar_index("key", "BTREE")
    compact_maintain = time.perf_counter() - t0
    measure("appends, compacted, BTREE", lance.dataset(path), compact_maintain)
    measure("rewritten in key order, BTREE", ordered_ds, maintain)
    return results


def threads() -> dict[str, Any]:
    """The thread settings the peers run with (each as its library reports it, or the
    environment variable and the documented default when the library has no getter)."""
    from deltalake import QueryBuilder

    qb = QueryBuilder({"datafusion.catalog.information_schema": "true"})
    partitions = pa.table(qb.execute("SHOW datafusion.execution.target_partitions").read_all()).column(1)[0].as_py()
    cores = os.cpu_count()
    return {"pyarrow cpu_count": pa.cpu_count(), "pyarrow io_thread_count": pa.io_thread_count(),
            "pyarrow memory pool": pa.default_memory_pool().backend_name,
            "delta-rs DataFusion target_partitions": partitions,
            "LANCE_CPU_THREADS": os.environ.get("LANCE_CPU_THREADS", f"unset (cores: {cores})"),
            "LANCE_IO_THREADS": os.environ.get("LANCE_IO_THREADS", "unset (8 for a local store)"),
            "RAYON_NUM_THREADS": os.environ.get("RAYON_NUM_THREADS", f"unset (cores: {cores})")}


def main() -> None:
    work, peer = Path(sys.argv[1]), sys.argv[2]
    if peer == "threads":
        print(json.dumps(threads()), flush=True)
        return
    out = work / f"{sys.argv[3]}-{peer}"
    out.mkdir()
    inputs = sorted((work / "inputs").glob("*.parquet"))
    q = json.loads((work / "queries.json").read_text())
    try:
        for r in {"delta": delta, "lance": lance_}[peer](out, inputs, q):
            print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
