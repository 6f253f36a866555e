"""Shared parts of bench/statestore_commits.py: tables of many files, committer threads,
the figures each backend yields and the table comparing two backends."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from statestore import AddFiles, FileReference, Schema, StateStore, partitions_from_split_points
from statestore.retry import Backoff

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}],
                           "sortKeyFields": [{"name": "ts", "type": "LongType"}],
                           "valueFields": [{"name": "value", "type": "StringType"}]})
THREADS = 4


class CountingBackoff(Backoff):
    """Backoff that counts the retries it sleeps for."""

    def __init__(self) -> None:
        super().__init__()
        self.retries = 0
        self._lock = threading.Lock()

    def pause(self, attempt: int) -> None:
        with self._lock:
            self.retries += 1
        super().pause(attempt)


def new_table(store: StateStore, leaves: int) -> tuple[str, list[str]]:
    points = [f"k{i:06d}" for i in range(1, leaves)]
    parts = partitions_from_split_points(SCHEMA, points)
    info = store.create_table(f"bench-{uuid.uuid4().hex[:8]}", SCHEMA, parts)
    return info.table_id, [p.id for p in parts if p.is_leaf]


def add_files(store: StateStore, table_id: str, leaf_ids: list[str], n: int,
              prefix: str) -> list[FileReference]:
    refs = tuple(FileReference(f"{prefix}/{uuid.uuid4().hex}.parquet", leaf_ids[i % len(leaf_ids)], 1000)
                 for i in range(n))
    store.commit(table_id, AddFiles(refs))
    return list(refs)


def run_threads(n_threads: int, work: Callable[[int], int]) -> tuple[int, float]:
    """Run ``work(thread_index)`` in threads; return (total operations, seconds)."""
    counts = [0] * n_threads
    errors: list[BaseException] = []

    def target(i: int) -> None:
        try:
            counts[i] = work(i)
        except BaseException as e:  # report after joining
            errors.append(e)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(n_threads)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(counts), elapsed


def baseline(run_for: Callable[[int, float], int], seconds: float) -> tuple[float, float]:
    """(operations/s from THREADS threads, operations/s from one thread), where
    ``run_for(thread, seconds)`` repeats the baseline operation for ``seconds`` and
    returns how many it did."""
    n, s = run_threads(THREADS, lambda i: run_for(i, seconds))
    n1, s1 = run_threads(1, lambda i: run_for(i, seconds))
    return n / s, n1 / s1


@dataclass
class Figures:
    """One backend's figures from one run. The baseline is the plainest round trip the
    backend's server answers (``base_op``), per second from THREADS threads and from one."""

    backend: str
    base_op: str
    base_rate: float                   # base_op/s, THREADS threads
    base_rate_1: float                 # base_op/s, one thread
    commits_per_s: float = 0.0         # (a) small compaction commits, THREADS committers, one table
    commits_per_s_jobs: float = 0.0    # (a) the same, each commit also saving its job record
    files_per_s: float = 0.0           # (b) one AddFiles commit of 100k files
    commit_s_1k: float = 0.0           # (c) median small commit, 1k references in the table
    commit_s_100k: float = 0.0         # (c) ... 100k references
    load_s: float = 0.0                # (d) a fresh store loading a state of 100k references
    load_how: str = ""


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}" if abs(x) >= 1 else f"{x:.3g}"


def comparison(pg: Figures, dd: Figures) -> str:
    """A table of both backends' figures, each also against its own baseline ("x base":
    a rate divided by the baseline's rate, a time multiplied by it, i.e. counted in
    baseline round trips; (a) against THREADS threads' baseline, the rest against one
    thread's), and DynamoDB's figure over PostgreSQL's, raw and so normalised."""
    w = (40, 14, 10, 14, 10, 9, 11)

    def line(*cells: str) -> str:
        return cells[0].ljust(w[0]) + "".join(c.rjust(n) for c, n in zip(cells[1:], w[1:]))

    def row(label: str, unit: str, p: float, p_base: float, d: float, d_base: float, time: bool) -> str:
        p_rel, d_rel = (p * p_base, d * d_base) if time else (p / p_base, d / d_base)
        scale = 1e3 if unit == "ms" else 1.0
        return line(label, f"{_num(p * scale)} {unit}", _num(p_rel), f"{_num(d * scale)} {unit}", _num(d_rel),
                    _num(d / p), _num(d_rel / p_rel))

    def rate(label: str, p: float, d: float) -> str:
        return line(label, f"{_num(p)} /s", "", f"{_num(d)} /s", "", _num(d / p), "")

    rows = [
        " " * w[0] + pg.backend.rjust(w[1] + w[2]) + dd.backend.rjust(w[3] + w[4]) + "DDB / PG".rjust(w[5] + w[6]),
        line("", "value", "x base", "value", "x base", "raw", "normalised"),
        rate(f"baseline ({pg.base_op} | {dd.base_op}), {THREADS} threads", pg.base_rate, dd.base_rate),
        rate(f"baseline ({pg.base_op} | {dd.base_op}), 1 thread", pg.base_rate_1, dd.base_rate_1),
        row(f"(a) compaction commits, {THREADS} committers", "/s", pg.commits_per_s, pg.base_rate,
            dd.commits_per_s, dd.base_rate, False),
        row("(a) ... each also saving its job record", "/s", pg.commits_per_s_jobs, pg.base_rate,
            dd.commits_per_s_jobs, dd.base_rate, False),
        row("(b) files/s in one 100k-file AddFiles", "/s", pg.files_per_s, pg.base_rate_1,
            dd.files_per_s, dd.base_rate_1, False),
        row("(c) small commit, 1k references", "ms", pg.commit_s_1k, pg.base_rate_1,
            dd.commit_s_1k, dd.base_rate_1, True),
        row("(c) small commit, 100k references", "ms", pg.commit_s_100k, pg.base_rate_1,
            dd.commit_s_100k, dd.base_rate_1, True),
        line("(c) 100k / 1k (flat = 1)", _num(pg.commit_s_100k / pg.commit_s_1k), "",
             _num(dd.commit_s_100k / dd.commit_s_1k)),
        row("(d) load 100k references, fresh store", "s", pg.load_s, pg.base_rate_1, dd.load_s, dd.base_rate_1, True),
    ]
    notes = ["x base: a rate over its baseline's rate; a time in baseline round trips (time x baseline rate).",
             "normalised: DynamoDB's x base over PostgreSQL's (rates: above 1 is better; times: below 1).",
             f"(d) PostgreSQL: {pg.load_how}; DynamoDB: {dd.load_how}.",
             "Sleeper's published minimums: > 50 commits/s per table (lambda committer), > 100/s (EC2), "
             "> 7,000 files/s."]
    return "\n".join([*rows, *notes])
