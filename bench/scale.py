"""A table of Sleeper's system-test schema built up to a billion rows, as a user runs it.

One table on the embedded PostgreSQL and local disk, created with one partition (the
root) and ``sleeper.table.partition.splitting.threshold`` = ``--split-threshold``. Three
processes work at once:

- **ingest** (this process, as ``sleeper ingest`` or an ingest task): batches of
  ``--batch-rows`` rows, generated on the fly from a counter (:mod:`_scale_rows`: every
  key distinct, every batch spread over the whole key space), each ingested with
  ``Table.ingest`` (one Arrow table, one chunk, one commit). Generation is not timed.
- **maintenance** (a second process, as an Airflow worker): passes of the split,
  compaction and GC DAGs' tasks, the same library calls under the same leases
  (:mod:`_scale_maintain` says which), looping as long as there is work.
- **lookups** (at each checkpoint, new processes, as a user's client):
  :mod:`_scale_probe`; ingest waits while they run, maintenance goes on.

The table has ``sleeper.table.ingest.max.files.per.leaf`` = ``--max-files-per-leaf``
(8; 0 turns it off): an ingest waits while some leaf holds more file references than
that, until maintenance has compacted them (:mod:`sleeper_ops.ingest.stall`), so ingest
runs no faster than maintenance keeps up with, as the issue asks. It has
``sleeper.table.maintenance.nice`` = ``--maintenance-nice`` (10, as
docs/usage/maintenance.md advises for one machine): the maintenance process lowers itself to it before each pass, as the
DAGs' tasks do (:mod:`sleeper_ops.maintenance.priority`).

Every ``--every`` rows a checkpoint records: the ingest rate of the interval (rows over
the seconds spent in ``Table.ingest``, waits for compaction included) and the share of
those seconds spent waiting, leaves, files per leaf (mean, max), the
compaction backlog (file references beyond one per leaf, plus those still in split
partitions), exact-key and ~1,000-row range lookups p50/p99 cold and warm (all checked
by content), the peak RSS of the ingest and maintenance processes over the interval
(``/proc/PID/statm`` every 20 ms), bytes on disk per row (the data directory, garbage
not yet collected included; the state store's directory apart), the state store's
commit times (ingest's and maintenance's commits over the interval, p50 and max) and
load time (``Table.state()``, a whole state read), the rows compacted and the 1-minute
load average. The first checkpoint is the baseline of the ratios printed at the end.

Disk: before every batch the rows that fit while leaving 20% of the disk free are
computed again, from the bytes the table's home holds so far per row (state store and
garbage not yet collected included; 100 bytes a row before the first batch), keeping
room for one more rewrite of the largest leaf; when the next batch would not fit the
run stops there, saying so, and reports what it built. SIGTERM (``kill PID``) ends a
run cleanly: maintenance and the embedded PostgreSQL stop and the home is removed.

    .venv/bin/python bench/scale.py [--rows 1000000000] [--every 100000000]
        [--batch-rows 4000000] [--split-threshold 16000000] [--max-files-per-leaf 8]
        [--maintenance-nice 10] [--json PATH] [--plot PATH] [--update-docs] [--dir DIR] [--smoke]

``--update-docs`` writes the table and the plot (``docs/operations/scale.png``) into the
"Scale" section of ``docs/operations/benchmarks.md``. Goals (issue 36): ingest rate and
lookup p50 at 1 B rows within 1.3x of their values at 100 M; warm p99 <= 5 ms; peak RSS
flat.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

import _common  # noqa: F401  (sets sys.path)
import _scale_report as report
import _scale_rows as gen
from _common import parse_args, percentiles, stopping_embedded
from _scale_maintain import maintain, timed_commits

from sleeper_ops.demo import SYSTEM_TEST_SCHEMA

BENCH = Path(__file__).resolve().parent
PAGE = os.sysconf("SC_PAGE_SIZE")
FREE_FRACTION = 0.2
FIRST_GUESS_BYTES_PER_ROW = 100.0
TABLE = "scale"


class PeakRss:
    """The peak RSS (MB) of some processes since the last :meth:`take`, sampled every 20 ms."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids, self.peaks = pids, dict.fromkeys(pids, 0.0)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for name, pid in self.pids.items():
            try:
                with open(f"/proc/{pid}/statm") as f:
                    mb = int(f.read().split()[1]) * PAGE / 2**20
            except OSError:
                continue
            self.peaks[name] = max(self.peaks[name], mb)

    def _run(self) -> None:
        while not self._done.wait(0.02):
            self._sample()

    def take(self) -> dict[str, float]:
        self._sample()
        out, self.peaks = self.peaks, dict.fromkeys(self.pids, 0.0)
        return out

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:  # GC deleted it meanwhile
                pass
    return total


class DiskGuard:
    """How many rows fit while leaving :data:`FREE_FRACTION` of the disk free."""

    def __init__(self, path: Path, split_threshold: int) -> None:
        self.path, self.split_threshold = path, split_threshold
        self.bytes_per_row = FIRST_GUESS_BYTES_PER_ROW

    def rows_that_fit(self, rows_now: int) -> int:
        usage = shutil.disk_usage(self.path)
        spare = usage.free - FREE_FRACTION * usage.total - 2 * self.split_threshold * self.bytes_per_row
        return rows_now + max(0, int(spare / self.bytes_per_row))

    def line(self, rows_now: int) -> str:
        usage = shutil.disk_usage(self.path)
        return (f"disk {usage.free / 1e9:,.1f} GB free of {usage.total / 1e9:,.1f} GB; at "
                f"{self.bytes_per_row:,.1f} bytes a row, {self.rows_that_fit(rows_now):,} rows fit leaving "
                f"{FREE_FRACTION:.0%} free")


def table_shape(state: Any) -> dict[str, Any]:
    """Leaves, files per leaf and the compaction backlog of a :class:`TableState`."""
    leaves = {p.id for p in state.partitions.values() if p.is_leaf}
    per_leaf = dict.fromkeys(leaves, 0)
    elsewhere = 0
    for (_, partition), _ref in state.references.items():
        if partition in per_leaf:
            per_leaf[partition] += 1
        else:
            elsewhere += 1
    counts = list(per_leaf.values())
    return {"leaves": len(leaves), "files": len(state.references), "files_per_leaf": statistics.mean(counts),
            "files_per_leaf_max": max(counts), "backlog": elsewhere + sum(max(0, c - 1) for c in counts),
            "records": sum(r.record_count for r in state.references.values()),
            "records_approximate": any(r.count_approximate for r in state.references.values())}


def maintenance_since(log_path: Path, since: float) -> list[dict[str, Any]]:
    if not log_path.exists():
        return []
    entries = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    return [e for e in entries if e["end"] > since]


def probe(home: Path, rows: int, seed: int, cold: int, warm: int) -> dict[str, Any]:
    arg = json.dumps({"home": str(home), "table": TABLE, "rows": rows, "seed": seed, "cold": cold, "warm": warm})
    out = subprocess.run([sys.executable, str(BENCH / "_scale_probe.py"), arg], capture_output=True, text=True,
                         timeout=3600, env=dict(os.environ, SLEEPER_HOME=str(home)))
    if out.returncode != 0:
        sys.exit(f"the checkpoint's lookups at {rows:,} rows failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def _ms(xs: list[float]) -> dict[str, float]:
    p = percentiles(xs)
    return {"p50": p["p50"], "p99": p["p99"]}


def checkpoint(ctx: dict[str, Any], table: Any, rows: int) -> dict[str, Any]:
    """The figures at ``rows`` rows (the module docstring lists them), for the interval
    since the previous checkpoint."""
    t0 = time.perf_counter()
    state = table.state()
    load_here = time.perf_counter() - t0
    shape = table_shape(state)
    looked = probe(ctx["home"], rows, rows, ctx["cold"], ctx["warm"])
    passes = maintenance_since(ctx["log"], ctx["since"])
    maint_commits = [c for e in passes for c in e["commits"]]
    data, pg = disk_bytes(ctx["home"] / "data"), disk_bytes(ctx["pg_dir"])
    ingest_commits, ctx["commits"][:] = list(ctx["commits"]), []
    rss = ctx["rss"].take()
    interval_rows = rows - ctx["last_rows"]
    cp = {
        "rows": rows, "ingest_rows_per_s": interval_rows / ctx["ingest_s"],
        "stalled_share": ctx["stalled_s"] / ctx["ingest_s"], "leaves": shape["leaves"],
        "files": shape["files"], "files_per_leaf": shape["files_per_leaf"],
        "files_per_leaf_max": shape["files_per_leaf_max"], "backlog": shape["backlog"],
        "records_in_state": shape["records"], "records_approximate": shape["records_approximate"],
        "exact_cold": _ms(looked["cold_exact"]), "exact_warm": _ms(looked["warm_exact"]),
        "range_cold": _ms(looked["cold_range"]), "range_warm": _ms(looked["warm_range"]),
        "rss_ingest_mb": rss["ingest"], "rss_maintenance_mb": rss["maintenance"],
        "bytes_per_row": data / rows, "statestore_bytes": pg,
        "commit_ms": _ms([c * 1000 for c in ingest_commits]) | {"max": max(ingest_commits) * 1000},
        "maintenance_commit_ms": (_ms([c * 1000 for c in maint_commits]) | {"max": max(maint_commits) * 1000}
                                  if maint_commits else None),
        "lookups_checked": sum(len(v) for k, v in looked.items() if k.startswith(("cold_", "warm_"))),
        "load_s": load_here, "load_new_process_s": looked["load_first_s"],
        "rows_compacted": sum(e["rows_compacted"] for e in passes), "splits": sum(e["splits"] for e in passes),
        "maintenance_passes": len(passes), "loadavg": os.getloadavg()[0],
        "elapsed_s": time.time() - ctx["started"],
    }
    ctx["last_rows"], ctx["ingest_s"], ctx["stalled_s"], ctx["since"] = rows, 0.0, 0.0, time.time()
    return cp


def settle(log_path: Path, since: float, timeout: float) -> Optional[float]:
    """Seconds until a maintenance pass that started after ``since`` found nothing to do
    (no split, no compaction job), or None if none did within ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for e in maintenance_since(log_path, since):
            if e["start"] >= since and not e["jobs"] and not e["splits"]:
                return e["end"] - since
        time.sleep(0.5)  # the maintenance process writes its log; nothing here to wait on
    return None


def build(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    from sleeper_ops.api import Sleeper
    from sleeper_ops.config import SleeperConfig

    (home / "sleeper.toml").write_text('[object_store]\nuri = "data"\n')
    guard = DiskGuard(home, args.split_threshold)
    target = min(args.rows, gen.MAX_ROWS)
    fit = guard.rows_that_fit(0)  # a first guess
    print(f"scale: {target:,} rows asked, checkpoints every {args.every:,}, batches of {args.batch_rows:,}, "
          f"split threshold {args.split_threshold:,}, maintenance at nice {args.maintenance_nice}; "
          f"{os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f}; {guard.line(0)}", flush=True)
    stopped: Optional[str] = None
    if fit < target:
        print(f"at most about {fit:,} rows may fit (bytes a row guessed until the first batch is measured): "
              f"the run stops before the disk has less than {FREE_FRACTION:.0%} free", flush=True)
    log_path = home / "maintenance.jsonl"
    stop = multiprocessing.get_context("spawn").Event()
    checkpoints: list[dict[str, Any]] = []
    with stopping_embedded(home), Sleeper(home) as s:
        table = s.create_table(TABLE, SYSTEM_TEST_SCHEMA, properties={
            "sleeper.table.partition.splitting.threshold": str(args.split_threshold),
            "sleeper.table.gc.delay.minutes": str(args.gc_delay_minutes),
            "sleeper.table.ingest.max.files.per.leaf": str(args.max_files_per_leaf),
            "sleeper.table.ingest.max.files.wait.seconds": str(args.max_files_wait),
            "sleeper.table.maintenance.nice": str(args.maintenance_nice)})
        worker = multiprocessing.get_context("spawn").Process(
            target=maintain, args=(str(home), TABLE, str(log_path), stop, args.pause), daemon=True)
        worker.start()
        assert worker.pid is not None
        ctx = {"home": home, "pg_dir": SleeperConfig.load(home).embedded_pg_dir, "log": log_path,
               "commits": timed_commits(s.state_store), "rss": PeakRss({"ingest": os.getpid(),
                                                                        "maintenance": worker.pid}),
               "cold": args.cold, "warm": args.warm, "last_rows": 0, "ingest_s": 0.0, "stalled_s": 0.0,
               "since": time.time(),
               "started": time.time()}
        done = 0
        try:
            while done < target:
                if not worker.is_alive():
                    sys.exit(f"the maintenance process ended (exit code {worker.exitcode}): see its error above")
                n = min(args.batch_rows, target - done, args.every - done % args.every)
                if done:
                    guard.bytes_per_row = max(disk_bytes(home) / done, 1.0)
                if guard.rows_that_fit(done) < done + n:
                    stopped = f"stopped early at {done:,} rows: {guard.line(done)}"
                    print(stopped, flush=True)
                    if done and done != (checkpoints[-1]["rows"] if checkpoints else 0):
                        checkpoints.append(checkpoint(ctx, table, done))  # what was built, measured
                        print(report.row_line(checkpoints[-1]), flush=True)
                    break
                batch = gen.rows(done, n)
                t0 = time.perf_counter()
                result = table.ingest(batch)
                ctx["ingest_s"] += time.perf_counter() - t0
                ctx["stalled_s"] += result.stalled_seconds
                if result.records != n:
                    sys.exit(f"ingest of rows {done:,}.. added {result.records:,} records, not {n:,}")
                done += n
                del batch
                if done % args.every == 0 or done == target:
                    cp = checkpoint(ctx, table, done)
                    checkpoints.append(cp)
                    print(report.row_line(cp), flush=True)
                    print(f"  {guard.line(done)}", flush=True)
            ingest_end = time.time()
            caught_up = settle(log_path, ingest_end, args.settle) if done else None
            settled = table_shape(table.state()) if done else None
            counted = table.query(ranges=[("", None)]).num_rows if done <= args.count_up_to else None
        finally:
            stop.set()
            worker.join(timeout=600)
            ctx["rss"].stop()
    if counted is not None and counted != done:
        sys.exit(f"the table holds {counted:,} rows after ingesting {done:,}")
    return {"rows": done, "asked": args.rows, "stopped": stopped, "checkpoints": checkpoints,
            "caught_up_s": caught_up, "settled": settled, "counted": counted,
            "command": report.command(sys.argv[1:]), "machine": report.machine(),
            "maintenance_nice": args.maintenance_nice,  # asked; and what its passes ran at:
            "maintenance_nice_seen": sorted({e["nice"] for e in maintenance_since(log_path, 0)}),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main() -> None:
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000_000)
    ap.add_argument("--every", type=int, default=100_000_000, help="rows between checkpoints")
    ap.add_argument("--batch-rows", type=int, default=4_000_000, help="rows per Table.ingest call")
    ap.add_argument("--split-threshold", type=int, default=16_000_000,
                    help="the table's sleeper.table.partition.splitting.threshold")
    ap.add_argument("--gc-delay-minutes", type=int, default=5, help="the table's sleeper.table.gc.delay.minutes")
    ap.add_argument("--max-files-per-leaf", type=int, default=8,
                    help="the table's sleeper.table.ingest.max.files.per.leaf (0: ingest never waits for compaction)")
    ap.add_argument("--max-files-wait", type=int, default=3600,
                    help="the table's sleeper.table.ingest.max.files.wait.seconds")
    ap.add_argument("--maintenance-nice", type=int, default=10,
                    help="the table's sleeper.table.maintenance.nice (10, as for one machine; 0: the worker's own)")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds a maintenance pass with nothing to do waits")
    ap.add_argument("--cold", type=int, default=10, help="cold lookups of each kind per checkpoint")
    ap.add_argument("--warm", type=int, default=200, help="warm lookups of each kind per checkpoint")
    ap.add_argument("--settle", type=float, default=900.0,
                    help="seconds to wait after the last batch for maintenance to catch up")
    ap.add_argument("--count-up-to", type=int, default=10_000_000,
                    help="at the end, count every row by a full-range query if the table holds at most this many")
    ap.add_argument("--dir", default=None, help="where the table's home is made (a temporary directory)")
    ap.add_argument("--json", default=None, help="write the checkpoints here")
    ap.add_argument("--plot", default=None, help="draw the checkpoints into this PNG")
    ap.add_argument("--update-docs", action="store_true",
                    help="write the table and plot into docs/operations/benchmarks.md (Scale)")
    args = parse_args(ap, rows=300_000, every=100_000, batch_rows=50_000, split_threshold=40_000, cold=2, warm=20,
                      settle=60.0, pause=0.2, maintenance_nice=1)  # lowered, but hardly: the test suite is busy
    with tempfile.TemporaryDirectory(prefix="sleeper-scale-", dir=args.dir) as d:
        result = build(args, Path(d))
    print(report.table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.plot:
        report.plot(result, Path(args.plot))
    if args.update_docs:
        report.update_docs(result)


if __name__ == "__main__":
    main()
