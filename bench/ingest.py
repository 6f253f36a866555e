"""Standard ingest throughput and peak memory against a plain pyarrow Parquet write of
the same rows.

Schema: Sleeper's system test (string key, long sort key, two string values). The
input is one Parquet file (written in 1 M-row pieces, so making it holds little
memory); the table has 8 leaf partitions. The baseline streams the same input into
one zstd Parquet file with pyarrow defaults (no sort, no partitioning, no sketches).
Each repeat measures the baseline and then each ingest, and every ratio is taken
within one repeat. Figures: the median over the repeats and the spread (min–max).

Each ingest runs in a new process, as ``sleeper ingest`` and an Airflow task run one
(on the embedded PostgreSQL; ``--state-store memory`` ingests in this process), and
samples its own peak RSS (``/proc/self/statm``, every 5 ms) while the ingest runs: it
is bounded by the ingest's chunk (``max_chunk_rows``, 4 M rows by default), not by the
input, so it stays flat as ``--rows`` grows past a chunk. The spilled variant's chunk is
a quarter of the rows, so its peak grows with them.

    .venv/bin/python bench/ingest.py [--rows 5000000] [--repeat 3] [--state-store postgres|memory]
                                     [--rowgroup-rows N [N ...]]

``--rowgroup-rows`` measures ingest once per row group size (the tables'
``sleeper.table.parquet.rowgroup.rows.max``), all in this run against one baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import _common  # noqa: F401  (sets sys.path)
import pyarrow.parquet as pq
from _common import bench_sleeper, parse_args

from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


@contextmanager
def peak_rss() -> Iterator[dict[str, float]]:
    """The largest RSS (MB) seen while the block runs, in the yielded dict's ``peak``."""
    out = {"peak": _rss_mb()}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            out["peak"] = max(out["peak"], _rss_mb())
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        yield out
    finally:
        done.set()
        t.join()
        out["peak"] = max(out["peak"], _rss_mb())


def write_input(path: Path, rows: int) -> None:
    piece = 1_000_000
    with pq.ParquetWriter(path, generate_rows(1, seed=0).schema) as w:
        for i, start in enumerate(range(0, rows, piece)):
            w.write_table(generate_rows(min(piece, rows - start), seed=7 + i))


def baseline(src: Path, dst: Path) -> float:
    """Seconds to stream ``src`` into a zstd Parquet file with pyarrow."""
    t0 = time.perf_counter()
    f = pq.ParquetFile(src)
    with pq.ParquetWriter(dst, f.schema_arrow, compression="zstd") as w:
        for b in f.iter_batches(batch_size=262_144):
            w.write_batch(b)
    return time.perf_counter() - t0


def ingest_measured(s: Any, name: str, src: str, options: dict[str, Any]) -> dict[str, Any]:
    """One ingest of ``src`` into table ``name``: its seconds, peak RSS (MB) while it ran,
    records and spilled chunks."""
    t = s.table(name)
    with peak_rss() as rss:
        t0 = time.perf_counter()
        r = t.ingest([src], **options)
        took = time.perf_counter() - t0
    return {"seconds": took, "peak": rss["peak"], "records": r.records, "spilled": r.spilled_chunks}


def ingest_in_new_process(home: Path, name: str, src: Path, options: dict[str, Any]) -> dict[str, Any]:
    """:func:`ingest_measured` in a new interpreter on the Sleeper at ``home``."""
    out = subprocess.run([sys.executable, __file__, "--child", str(home), name, str(src), json.dumps(options)],
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit(f"the ingest of {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def child(home: str, name: str, src: str, options: str) -> None:
    """``--child``: print :func:`ingest_measured`'s figures as one JSON line."""
    from sleeper_ops.api import Sleeper

    s = Sleeper(home=home)
    try:
        print(json.dumps(ingest_measured(s, name, src, json.loads(options))))
    finally:
        s.close()


def _cell(xs: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:6])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--state-store", default="postgres", choices=["postgres", "memory"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rowgroup-rows", type=int, nargs="+", default=[None])
    args = parse_args(ap, rows=20_000, repeat=1)

    with bench_sleeper(args.state_store) as (s, d):
        src = d / "input.parquet"
        write_input(src, args.rows)
        print(f"standard ingest of {args.rows:,} rows (string key, long sort key, 2 string values), "
              f"state store {args.state_store}, {args.repeat} repeats; RSS before ingesting {_rss_mb():,.0f} MB")
        base: list[float] = []
        runs: dict[tuple[Any, str], list[tuple[float, float]]] = {}  # (rg, variant) -> (seconds, peak MB)
        for i in range(args.repeat):
            base.append(baseline(src, d / f"copy-{i}.parquet"))
            os.remove(d / f"copy-{i}.parquet")
            for rg in args.rowgroup_rows:
                props = {} if rg is None else {"sleeper.table.parquet.rowgroup.rows.max": str(rg)}
                for variant, options in (("ingest", {}), ("spill", {"max_chunk_rows": max(1, args.rows // 4)})):
                    name = f"{variant}{i}_{rg}"
                    s.create_table(name, SYSTEM_TEST_SCHEMA, split_points=split_points(7), properties=props)
                    if args.state_store == "memory":
                        got = ingest_measured(s, name, str(src), options)
                    else:
                        got = ingest_in_new_process(d, name, src, options)
                    assert got["records"] == args.rows
                    assert variant == "ingest" or got["spilled"] >= 4
                    runs.setdefault((rg, variant), []).append((got["seconds"], got["peak"]))
        n = args.rows
        print(f"  baseline: pyarrow read + write zstd  {_cell([n / b for b in base], '{:,.0f}')} rows/s")
        for rg in args.rowgroup_rows:
            label = "" if rg is None else f" ({rg}-row groups)"
            for variant, name in (("ingest", "ingest, 4 M-row chunks"), ("spill", "ingest, 4 spilled chunks + merge")):
                got = runs[(rg, variant)]
                print(f"  {name + label:<40} {_cell([n / x for x, _ in got], '{:,.0f}')} rows/s   "
                      f"ratio to baseline {_cell([b / x for b, (x, _) in zip(base, got)], '{:.2f}')}   "
                      f"peak RSS {_cell([p for _, p in got], '{:,.0f}')} MB")
        print("  goal: >= 1,000,000 rows/s on 2 cores; peak RSS flat as --rows grows")


if __name__ == "__main__":
    main()
