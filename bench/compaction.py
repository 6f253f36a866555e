"""Compaction throughput: 11 sorted files merged into one, against a plain copy.

Schema: Sleeper's system test (string key, long sort key, two string values). For
each of two input sizes (``--rows`` and ``--big``) the bench ingests 11 equal batches
into a fresh one-partition table (each ingest writes one sorted file with its
sketches; the size-ratio strategy then merges all 11 in one job) and measures, each
in a child process of its own so its peak RSS can be read:

* plain copy: the same 11 files read with pyarrow (``ParquetFile.iter_batches``) and
  written to one file by :class:`~sleeper_ops.io.datafile.DataFileWriter` with the
  table's Parquet settings (like-for-like with the compaction's writer: zstd, no
  dictionary, statistics, page index, the table's row group size), no merge, no
  sketch (the compaction of whole files merges the inputs' sketches instead);
* plain copy, read ahead: the same, with the reading in a background thread a few
  batches ahead of the writer (as the merge runs), so reading overlaps encoding;
* runner local: ``table.compact(runner="local")`` (job creation, DataFusion merge,
  write, commit; the CPU time is the whole child's);
* sleeper compact (CLI): ``sleeper --home HOME compact TABLE --runner local`` as a new
  process (the venv's console script), as a user runs it: the whole wall time from the
  process's start to its exit (interpreter start-up, imports, joining the state store,
  job creation, merge, sketches, write, commit), its CPU time and peak RSS from
  ``wait4``. The bench's own process keeps the embedded PostgreSQL running, so the
  command joins it (as it joins a server another command left running);
* compaction DAG (``airflow dags test``): the table's compaction DAG
  (``sleeper_<table>_compaction``: ``create_jobs`` -> ``run_local`` -> ``report``) run
  by ``airflow dags test`` as a new process, with an Airflow home of the bench's own
  (SQLite, migrated once at the start) and the same Sleeper home: the whole wall time
  (Airflow's start-up, parsing the DAG file, the three tasks) and, on a row of its
  own, the ``run_local`` task's duration as Airflow records it (what the UI shows);
* runner spark: ``table.compact(runner="spark")``, one spark-submit (its 10-20 s of
  start-up included; the rate inside the Spark task is printed too);
* sleeper compact, shared files (``--shared``): the same command on a table whose one
  partition was split in two at its median before compacting (``table.split()``), so
  both leaves reference every input file and each leaf's job reads only its range of
  each (the region filter, ``job.whole_files`` false): two jobs, two outputs, every
  row once. This is the compaction of files an append shares between leaves.

Every runner merges the same data: the inputs are rebuilt (re-ingested into a fresh
table) before each run, and the kinds run interleaved (copy, runner, CLI, copy, ...).
``vs copy`` is to the faster plain copy of the same size in this run (medians); ``vs
plain copy`` is issue 36's ratio, the plain copy's time over each kind's within each
repeat (for the DAG, its ``run_local`` task's), their median and spread. Each figure is
the median of ``--repeat`` runs (the spark runner runs once a size), with the
spread of their seconds; the CPU seconds column shows what other work on the
machine hides. Peak RSS is the child's high-water mark (for spark: the largest process the
child waited for, normally the spark-submit JVM; Spark's Python workers may not be
counted); bounded memory shows as the same peak at both sizes. ``--rowgroup-rows``
sets the tables' ``sleeper.table.parquet.rowgroup.rows.max``: on local disk
DataFusion's allocator keeps read buffers over 128 KiB (column chunks of big row
groups) until its I/O threads idle, so peak RSS grows with the input there; with
column chunks under 128 KiB (about 16k rows of this schema), or on S3, it is flat.
The merged output is checked: one file, every row, in key order, same checksum.

    .venv/bin/python bench/compaction.py [--rows 2000000] [--big 4000000] [--repeat 2] [--no-spark]
                                           [--no-dag] [--shared] [--rowgroup-rows N]
    .venv/bin/python bench/compaction.py --rows 10000000     # the issue's figure (--big defaults to 2x)
    .venv/bin/python bench/compaction.py --rows 11000000 --big 0 --repeat 3 --no-spark   # 11 files of 1 M rows
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import _common  # noqa: F401  (sets sys.path)
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _common import parse_args, stopping_embedded

from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows

FILES = 11
RESULT = "RESULT "


# ----- child processes: one measurement each ------------------------------------------
def _peak_rss_mb(include_children: bool = False) -> float:
    """This process's peak RSS (VmHWM), or its largest descendant's if bigger."""
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak_kb = int(line.split()[1])
    except OSError:
        pass
    if include_children:
        peak_kb = max(peak_kb, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return peak_kb / 1024


def _cpu_seconds() -> float:
    """CPU time of this process's threads and its waited-for descendants."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _read_ahead(items: Iterator[Any], depth: int = 4) -> Iterator[Any]:
    q: queue.Queue[Any] = queue.Queue(depth)
    end = object()

    def produce() -> None:
        for item in items:
            q.put(item)
        q.put(end)
    threading.Thread(target=produce, daemon=True).start()
    while (item := q.get()) is not end:
        yield item


def _child_copy(s: Any, table_name: str, ahead: bool) -> dict[str, Any]:
    from sleeper_ops.io.datafile import DataFileWriter, ParquetSettings, new_data_key

    t = s.table(table_name)
    keys = sorted({r.filename for r in t.state().references.values()})
    started, cpu = time.perf_counter(), _cpu_seconds()

    def batches() -> Iterator[pa.RecordBatch]:
        for k in keys:
            with s.objects.open_input(k) as f:
                yield from pq.ParquetFile(f).iter_batches(batch_size=65536)
    w = DataFileWriter(s.objects, new_data_key(t.info.table_id, "copy"), t.schema, ParquetSettings.of(t.info),
                       sketch_rows=False)
    for b in (_read_ahead(batches()) if ahead else batches()):
        w.write(b)
    written = w.close()
    return {"seconds": time.perf_counter() - started, "cpu_seconds": _cpu_seconds() - cpu,
            "rows": written.record_count, "output": s.objects.uri_of(written.key)}


def _child_compact(s: Any, table_name: str, runner: str) -> dict[str, Any]:
    import datafusion  # noqa: F401  (import cost is not compaction's)

    import sleeper_ops.compaction.runners  # noqa: F401

    t = s.table(table_name)
    started, cpu = time.perf_counter(), _cpu_seconds()
    report = t.compact(runner=runner)
    seconds, cpu = time.perf_counter() - started, _cpu_seconds() - cpu
    bad = [r for r in report.results if r.status != "committed"]
    if len(report.results) != 1 or bad:
        why = "; ".join(f"{r.status}: {r.reason}" for r in bad) or f"{len(report.results)} jobs, expected 1"
        raise RuntimeError(" ".join(why.split())[-300:])
    refs = list(t.state().references.values())
    return {"seconds": seconds, "cpu_seconds": cpu, "rows": report.rows_read, "task_seconds": report.results[0].seconds,
            "output": s.objects.uri_of(refs[0].filename), "references": len(refs)}


def child_main(args: argparse.Namespace) -> None:
    from sleeper_ops.api import Sleeper

    with Sleeper(home=args.home) as s:
        try:
            if args.child in ("copy", "copy-ahead"):
                out = _child_copy(s, args.table, ahead=args.child == "copy-ahead")
            else:
                out = _child_compact(s, args.table, args.child)
        except Exception as e:
            out = {"error": f"{type(e).__name__}: {e}"}
    out["peak_rss_mb"] = _peak_rss_mb(include_children=args.child == "spark")
    print(RESULT + json.dumps(out), flush=True)


# ----- the parent: inputs, runs, checks, the table --------------------------------------
def _sum(values: pa.ChunkedArray | pa.Array) -> int:
    """The exact sum of int64 ``values`` (Arrow's int64 sum wraps on overflow)."""
    step = 1_000_000  # 1 M timestamps below 2^40 sum to under 2^63
    return sum(pc.sum(values.slice(i, step)).as_py() or 0 for i in range(0, len(values), step))


def make_sources(d: Path, rows: int) -> tuple[list[str], int]:
    """11 unsorted Parquet batches of ``rows`` in all, and the sum of their timestamps."""
    d.mkdir(parents=True, exist_ok=True)
    paths, checksum = [], 0
    for i in range(FILES):
        n = rows // FILES + (1 if i < rows % FILES else 0)
        data = generate_rows(n, seed=1000 + i)
        checksum += _sum(data.column("timestamp"))
        p = d / f"batch-{i:02d}.parquet"
        pq.write_table(data, p)
        paths.append(str(p))
    return paths, checksum


def build_inputs(s: Any, name: str, sources: list[str], properties: dict[str, str], *, split: bool = False) -> None:
    """A fresh one-partition table holding one sorted file per source; with ``split``,
    the partition is then split in two at its median (both leaves reference every file)."""
    t = s.create_table(name, SYSTEM_TEST_SCHEMA, properties=properties)
    for p in sources:
        t.ingest([p])
    files = {r.filename for r in t.state().references.values()}
    assert len(files) == FILES, f"expected {FILES} input files, got {len(files)}"
    if split:
        rows = sum(r.record_count for r in t.state().references.values())
        s.set_properties(name, {"sleeper.table.partition.splitting.threshold": str(rows - 1)})
        report = t.split()
        leaves = [p for p in t.state().partitions.values() if p.is_leaf]
        assert len(leaves) == 2, f"expected 2 leaves after the split, got {len(leaves)}: {report}"


def run_child(kind: str, home: Path, table: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--home", str(home), "--table", table]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit {p.returncode}: {tail[:300]}"}


#: Runs argv[1:] and prints its wall time, CPU time and peak RSS as JSON on the last line.
#: A small process of its own (no imports beyond the standard library's few), because a
#: process forked from this big one counts this one's resident pages in its peak RSS.
_LAUNCHER = """
import json, os, subprocess, sys, time
started = time.perf_counter()
p = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(p.pid, 0)
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "exit": os.waitstatus_to_exitcode(status),
                  "cpu_seconds": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024}))
"""


def run_cli(home: Path, table: str, timeout: float, jobs: int = 1) -> dict[str, Any]:
    """``sleeper compact TABLE --runner local`` as a new process (expected to commit
    ``jobs`` jobs): its wall time from start to exit, with the CPU time and peak RSS of
    that process alone (``wait4``)."""
    cmd = [str(Path(sys.executable).with_name("sleeper")), "--home", str(home), "compact", table, "--runner", "local"]
    env = {k: v for k, v in os.environ.items() if k != "SLEEPER_HOME"}
    try:
        p = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, *cmd], capture_output=True, text=True,
                           env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = p.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {"exit": p.returncode}
    if result["exit"] != 0 or f"{jobs} committed" not in p.stdout:
        tail = " ".join((p.stdout + p.stderr).split())[-300:]
        return {"error": f"exit {result['exit']}: {tail}"}
    return {k: result[k] for k in ("seconds", "cpu_seconds", "peak_rss_mb")}


def airflow_env(airflow_home: Path, home: Path) -> dict[str, str]:
    """The environment of an ``airflow`` command: the bench's Airflow home (SQLite), the
    project's DAG folder, the bench's Sleeper home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW", "SLEEPER_"))}
    env.update(AIRFLOW_HOME=str(airflow_home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__CORE__DAGS_FOLDER=str(Path(__file__).resolve().parents[1] / "dags"), SLEEPER_HOME=str(home),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return env


def migrate_airflow(airflow_home: Path, home: Path) -> None:
    """Make the bench's Airflow metadata database (``airflow db migrate``, once a run),
    or copy the migrated one named by ``SLEEPER_BENCH_AIRFLOW_DB`` (the smoke test's)."""
    airflow_home.mkdir(parents=True, exist_ok=True)
    migrated = os.environ.get("SLEEPER_BENCH_AIRFLOW_DB")
    if migrated:
        shutil.copyfile(migrated, airflow_home / "airflow.db")
        return
    p = subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], capture_output=True,
                       text=True, env=airflow_env(airflow_home, home), timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed: {(p.stdout + p.stderr)[-500:]}")


def run_dag(home: Path, airflow_home: Path, table: str, timeout: float) -> dict[str, Any]:
    """``airflow dags test sleeper_<table>_compaction`` as a new process: its wall time,
    CPU time and peak RSS (``wait4``), and each task's state and duration as Airflow
    recorded them in its database."""
    dag_id = f"sleeper_{table}_compaction"  # sleeper_ops.orchestration.dag_factory.dag_id_for
    cmd = [str(Path(sys.executable).with_name("airflow")), "dags", "test", dag_id]
    try:
        p = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, *cmd], capture_output=True, text=True,
                           env=airflow_env(airflow_home, home), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = p.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {"exit": p.returncode}
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        tasks = {task: (state, duration) for task, state, duration in db.execute(
            "SELECT task_id, state, duration FROM task_instance WHERE dag_id = ?", (dag_id,))}
    if result["exit"] != 0 or tasks.get("run_local", ("",))[0] != "success":
        tail = " ".join((p.stdout + p.stderr).split())[-300:]
        return {"error": f"exit {result['exit']}, tasks {tasks}: {tail}"}
    return {**{k: result[k] for k in ("seconds", "cpu_seconds", "peak_rss_mb")},
            "task_seconds": tasks["run_local"][1], "tasks": {k: v[1] for k, v in tasks.items()}}


def check_output(uri: str, rows: int, checksum: int, *, ordered: bool) -> None:
    """One file holding every row with the inputs' checksum; if ``ordered``, sorted by
    (key, timestamp)."""
    t = pq.read_table(uri, columns=["key", "timestamp"])
    assert t.num_rows == rows, f"{uri}: {t.num_rows} rows, expected {rows}"
    assert _sum(t.column("timestamp")) == checksum, f"{uri}: timestamp checksum differs"
    if not ordered:
        return
    k = t.column("key").combine_chunks()
    ts = t.column("timestamp").combine_chunks()
    a, b = k.slice(0, len(k) - 1), k.slice(1)
    in_order = pc.or_(pc.less(a, b), pc.and_(pc.equal(a, b), pc.less_equal(ts.slice(0, len(ts) - 1), ts.slice(1))))
    assert pc.all(in_order).as_py(), f"{uri}: rows out of key order"


def check_outputs(uris: list[str], rows: int, checksum: int) -> None:
    """Two files, one a leaf, each in key order, holding every row once between them (the
    inputs' checksum), the first leaf's keys all below the second's."""
    assert len(uris) == 2, f"{len(uris)} references after compaction, expected 2"
    read = sorted(((u, pq.read_table(u, columns=["key", "timestamp"])) for u in uris),
                  key=lambda ut: ut[1].column("key")[0].as_py())
    for u, t in read:
        check_output(u, t.num_rows, _sum(t.column("timestamp")), ordered=True)
    tables = [t for _, t in read]
    assert sum(t.num_rows for t in tables) == rows, "rows lost or doubled"
    assert sum(_sum(t.column("timestamp")) for t in tables) == checksum, "timestamp checksum differs"
    assert pc.max(tables[0].column("key")).as_py() < pc.min(tables[1].column("key")).as_py(), "leaves overlap"


def measure(s: Any, home: Path, kind: str, size: int, tag: str, sources: list[str], checksum: int,
            timeout: float, properties: dict[str, str]) -> dict[str, Any]:
    table = f"{kind.replace('-', '_')}_{size}_{tag}"
    build_inputs(s, table, sources, properties, split=kind == "cli-shared")
    if kind in ("cli", "cli-shared"):
        r = run_cli(home, table, timeout, jobs=2 if kind == "cli-shared" else 1)
    elif kind == "dag":
        r = run_dag(home, home.parent / "airflow", table, timeout)
    else:
        r = run_child(kind, home, table, timeout)
    if kind in ("cli", "cli-shared", "dag") and "error" not in r:
        refs = list(s.table(table).state().references.values())
        r.update(rows=sum(ref.record_count for ref in refs), references=len(refs),
                 outputs=[s.objects.uri_of(ref.filename) for ref in refs])
        r["output"] = r["outputs"][0]
    if "error" not in r:
        try:
            if kind == "cli-shared":
                check_outputs(r["outputs"], size, checksum)
            else:
                check_output(r["output"], size, checksum, ordered=kind in ("local", "cli", "dag", "spark"))
            if kind in ("local", "cli", "dag", "spark"):
                assert r["references"] == 1, f"{r['references']} references after compaction"
        except AssertionError as e:
            r = {"error": f"wrong output: {e}"}
    s.delete_table(table)
    return r


def median(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run (by seconds), with the spread of all runs' seconds and their
    highest peak RSS; any failed run instead."""
    failed = [r for r in results if "error" in r]
    if failed:
        return failed[0]
    ordered = sorted(results, key=lambda r: r["seconds"])
    mid = ordered[(len(ordered) - 1) // 2]
    out = {**mid, "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
           "spread": (ordered[0]["seconds"], ordered[-1]["seconds"])}
    if all("task_seconds" in r for r in results):  # the task's own median and spread, not the median run's
        tasks = sorted(r["task_seconds"] for r in results)
        out.update(task_seconds=tasks[(len(tasks) - 1) // 2], task_spread=(tasks[0], tasks[-1]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000, help="rows in all at the small size")
    ap.add_argument("--big", type=int, default=None,
                    help="rows in all at the large size (default 2 x --rows; 0: only --rows)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of the copies and the runners; the median is shown")
    ap.add_argument("--no-spark", action="store_true", help="skip the spark runner")
    ap.add_argument("--no-dag", action="store_true", help="skip the compaction DAG (airflow dags test)")
    ap.add_argument("--shared", action="store_true",
                    help="also sleeper compact of the files shared by two leaves (the table split before compacting)")
    ap.add_argument("--rowgroup-rows", type=int, default=None,
                    help="the tables' sleeper.table.parquet.rowgroup.rows.max (default: the property's default)")
    ap.add_argument("--spark-timeout", type=float, default=600)
    ap.add_argument("--child", choices=["copy", "copy-ahead", "local", "spark"], help=argparse.SUPPRESS)
    ap.add_argument("--home", help=argparse.SUPPRESS)
    ap.add_argument("--table", help=argparse.SUPPRESS)
    args = parse_args(ap, rows=5_500, big=11_000, repeat=1, no_spark=True, shared=True)  # smoke: no spark-submit
    if args.child:
        child_main(args)
        return
    sizes = [args.rows] if args.big == 0 else [args.rows, args.big or 2 * args.rows]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    kinds = (["copy", "copy-ahead", "local", "cli"] + (["cli-shared"] if args.shared else [])
             + ([] if args.no_dag else ["dag"]) + ([] if args.no_spark else ["spark"]))
    labels = {"copy": "plain copy", "copy-ahead": "plain copy, read ahead", "local": "runner local",
              "cli": "sleeper compact (CLI)", "cli-shared": "  shared by 2 leaves", "dag": "compaction DAG",
              "spark": "runner spark"}

    properties = {} if args.rowgroup_rows is None else {
        "sleeper.table.parquet.rowgroup.rows.max": str(args.rowgroup_rows)}
    from sleeper_ops.api import Sleeper

    with tempfile.TemporaryDirectory(prefix="sleeper-bench-compaction-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "sleeper.toml").write_text('[object_store]\nuri = "data"\n\n[spark]\nmaster = "local[*]"\n')
        table: dict[int, dict[str, dict[str, Any]]] = {}
        with stopping_embedded(home), Sleeper(home=home) as s:
            if "dag" in kinds:
                migrate_airflow(Path(tmp) / "airflow", home)
            print(f"compaction of {FILES} sorted files into one (string key, long sort key, 2 string values), "
                  f"{cores} cores, embedded PostgreSQL, local disk, row groups of "
                  f"{args.rowgroup_rows or 'the default number of'} rows")
            for size in sizes:
                sources, checksum = make_sources(Path(tmp) / f"src-{size}", size)
                runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
                for rep in range(args.repeat):
                    for kind in kinds:
                        if (kind == "spark" and rep > 0) or (kind == "dag" and args.smoke and size != sizes[0]):
                            continue  # one spark-submit a size; a smoke run's DAG at its first size only
                        timeout = args.spark_timeout if kind == "spark" else 3600
                        runs[kind].append(measure(s, home, kind, size, str(rep), sources, checksum, timeout,
                                                  properties))
                table[size] = {k: median(v) for k, v in runs.items() if v}
                print_size(size, table[size], labels, cores, vs_plain(runs))
        print_summary(sizes, table, cores)


def vs_plain(runs: dict[str, list[dict[str, Any]]]) -> dict[str, list[float]]:
    """Per kind, the plain copy's seconds over the kind's, each ratio from one repeat (the
    kinds of a repeat run one after the other; the DAG's from its run_local task): the
    baseline of issue 36, a plain pyarrow read and write. Kinds that failed, or ran fewer
    times than the copy (spark), have none."""
    plain = runs.get("copy", [])
    out: dict[str, list[float]] = {}
    for kind, results in runs.items():
        if len(results) != len(plain) or any("error" in r for r in results + plain):
            continue
        out[kind] = [c["seconds"] / r.get("task_seconds", r["seconds"]) for c, r in zip(plain, results)]
    return out


def _ratio_spread(ratios: Optional[list[float]]) -> str:
    if not ratios:
        return "-"
    ordered = sorted(ratios)
    return f"{ordered[(len(ordered) - 1) // 2]:.2f} ({ordered[0]:.2f}-{ordered[-1]:.2f})"


def print_size(size: int, rows: dict[str, dict[str, Any]], labels: dict[str, str], cores: int,
               plain: Optional[dict[str, list[float]]] = None) -> None:
    """One size's table. ``vs copy``: against the faster copy (medians); ``vs plain copy``:
    :func:`vs_plain`'s ratios, their median and spread."""
    plain = plain or {}
    copies = [r["seconds"] for k, r in rows.items() if k.startswith("copy") and "error" not in r]
    base = min(copies) if copies else None
    print(f"\n  {size:,} rows in {FILES} files")
    print(f"  {'':26}{'seconds':>9}{'rows/s':>13}{'rows/s/core':>13}{'vs copy':>9}{'peak RSS MB':>13}"
          f"{'CPU s':>8}  seconds min-max  vs plain copy (per repeat)")
    for kind, r in rows.items():
        if "error" in r:
            what = "spark: not available" if kind == "spark" else f"{labels[kind]}: failed"
            print(f"  {what} ({r['error']})")
            continue
        rate = size / r["seconds"]
        ratio = f"{base / r['seconds']:.2f}" if base else "-"
        print(f"  {labels[kind]:<26}{r['seconds']:>9.2f}{rate:>13,.0f}{rate / cores:>13,.0f}{ratio:>9}"
              f"{r['peak_rss_mb']:>13,.0f}{r['cpu_seconds']:>8.2f}  {r['spread'][0]:.2f}-{r['spread'][1]:.2f}"
              f"{'':>7}{_ratio_spread(plain.get(kind)) if kind != 'dag' else '-'}")
        if kind == "spark" and r.get("task_seconds"):
            print(f"  {'  (inside the Spark task)':<26}{r['task_seconds']:>9.2f}{size / r['task_seconds']:>13,.0f}")
        if kind == "dag":
            ts = r["task_seconds"]
            ratio = f"{base / ts:.2f}" if base else "-"
            print(f"  {'  (its run_local task)':<26}{ts:>9.2f}{size / ts:>13,.0f}{size / ts / cores:>13,.0f}{ratio:>9}"
                  f"{'':>13}{'':>8}  {r['task_spread'][0]:.2f}-{r['task_spread'][1]:.2f}"
                  f"{'':>7}{_ratio_spread(plain.get(kind))}")


def print_summary(sizes: list[int], table: dict[int, dict[str, dict[str, Any]]], cores: int) -> None:
    print()
    if len(sizes) < 2:
        print("  goals: sleeper compact (CLI) and the compaction DAG's run_local task >= 4,000,000 rows/s and "
              ">= 1.2 of the plain copy (issue 36)")
        return
    small, big = sizes
    for kind in ("local", "cli", "cli-shared", "spark"):
        a, b = table[small].get(kind), table[big].get(kind)
        if a and b and "error" not in a and "error" not in b:
            what = {"cli": "sleeper compact (CLI)", "cli-shared": "sleeper compact, shared files"}.get(
                kind, f"{kind} runner")
            print(f"  {what} peak RSS {a['peak_rss_mb']:,.0f} MB at {small:,} rows, "
                  f"{b['peak_rss_mb']:,.0f} MB at {big:,} rows (ratio {b['peak_rss_mb'] / a['peak_rss_mb']:.2f})")
    print(f"  goals: local runner >= 2,000,000 rows/s per core (here {cores} cores), "
          ">= 0.8 of the plain copy, peak RSS flat as inputs grow; sleeper compact (CLI) and the compaction DAG's "
          "run_local task >= 4,000,000 rows/s and >= 1.2 of the plain copy (issue 36)")


if __name__ == "__main__":
    main()
