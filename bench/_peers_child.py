"""The peers' side of ``bench/peers.py``: delta-rs and Lance load, maintain and query the
same Parquet inputs and keys as ours. Runs with the peers' own venv's Python
(``bench/.peers-venv``), never the project's: it imports nothing of the project.

    bench/.peers-venv/bin/python bench/_peers_child.py WORK_DIR

``WORK_DIR`` holds ``inputs/*.parquet`` (the appends, loaded in name order) and
``queries.json`` (``keys``, ``ranges`` and ``warmup``); this prints one JSON object per
system on stdout (the last lines), with each load's seconds, the maintenance seconds and
per-query milliseconds and row counts.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

ROW_GROUP_ROWS = 100_000


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _timed(queries: list[Any], warmup: int, run: Callable[[Any], int]) -> tuple[list[float], list[int]]:
    for q in queries[:warmup]:
        run(q)
    ms, rows = [], []
    for q in queries:
        t0 = time.perf_counter()
        n = run(q)
        ms.append((time.perf_counter() - t0) * 1000)
        rows.append(n)
    return ms, rows


def delta(work: Path, inputs: list[Path], q: dict[str, Any]) -> dict[str, Any]:
    from deltalake import DeltaTable, QueryBuilder, WriterProperties, write_deltalake

    path = str(work / "delta")
    loads = []
    for f in inputs:
        t0 = time.perf_counter()
        write_deltalake(path, pq.read_table(f), mode="append")
        loads.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    DeltaTable(path).optimize.z_order(["key"], writer_properties=WriterProperties(max_row_group_size=ROW_GROUP_ROWS))
    maintain = time.perf_counter() - t0
    dt = DeltaTable(path)
    qb = QueryBuilder().register("t", dt)

    def sql(where: str) -> int:
        return pa.table(qb.execute(f"SELECT * FROM t WHERE {where}").read_all()).num_rows

    exact = _timed(q["keys"], q["warmup"], lambda k: sql(f"key = {_quote(k)}"))
    ranged = _timed(q["ranges"], q["warmup"],
                    lambda r: sql(f"key >= {_quote(r[0])} AND key < {_quote(r[1])}"))
    return {"system": "delta-rs (SQL)", "loads": loads, "maintain": maintain, "files": len(dt.file_uris()),
            "exact": exact, "range": ranged}


def lance_(work: Path, inputs: list[Path], q: dict[str, Any]) -> dict[str, Any]:
    import lance

    path = str(work / "lance")
    loads = []
    for i, f in enumerate(inputs):
        t0 = time.perf_counter()
        lance.write_dataset(pq.read_table(f), path, mode="create" if i == 0 else "append")
        loads.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    ds = lance.dataset(path)
    ds.optimize.compact_files()
    ds = lance.dataset(path)
    ds.create_scalar_index("key", "BTREE")
    maintain = time.perf_counter() - t0
    ds = lance.dataset(path)

    def scan(where: str) -> int:
        return int(ds.to_table(filter=where).num_rows)

    exact = _timed(q["keys"], q["warmup"], lambda k: scan(f"key = {_quote(k)}"))
    ranged = _timed(q["ranges"], q["warmup"], lambda r: scan(f"key >= {_quote(r[0])} AND key < {_quote(r[1])}"))
    return {"system": "Lance (BTREE)", "loads": loads, "maintain": maintain, "files": len(ds.get_fragments()),
            "exact": exact, "range": ranged}


def main() -> None:
    work = Path(sys.argv[1])
    inputs = sorted((work / "inputs").glob("*.parquet"))
    q = json.loads((work / "queries.json").read_text())
    for run in (delta, lance_):
        print(json.dumps(run(work, inputs, q)), flush=True)


if __name__ == "__main__":
    main()
