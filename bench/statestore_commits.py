"""State store commit benchmark: PostgreSQL and DynamoDB in one run (not a pass/fail test).

Each backend is measured against the plainest round trip its server answers, in the
same run: PostgreSQL (embedded, or ``--dsn``) against ``SELECT 1``, DynamoDB (a moto
server in a process of its own answering one request at a time, or ``--endpoint-url``)
against moto's plain PutItem, since moto is far slower than DynamoDB. Both from 4
threads and from one. Then, for each backend:

(a) small compaction-style commits/s (ReplaceFileReferences: 3 inputs -> 1 output) on
    one table from 4 concurrent committers, without and with each job's record
    (DynamoDB: each commit racing for the log, then through group commit, whose
    figures go in the comparison table);
(b) files/s in one AddFiles commit of 100k files;
(c) the time of a small commit on a table with 1k vs 100k existing references (the
    ratio should be about 1: commits cost O(size of the change));
(d) the time a fresh store takes to load a state of 100k references (DynamoDB: from a
    snapshot plus a tail).

With both backends (the default) it ends with a table of both sets of figures, each
also against its own baseline, and DynamoDB's over PostgreSQL's.

Usage: ``python bench/statestore_commits.py [--backend both|postgres|dynamodb]
[--dsn DSN] [--endpoint-url URL] [--moto-txn stock|copy-once|journal]``. Takes under 3 minutes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

from _statestore_common import (
    THREADS,
    CountingBackoff,
    Figures,
    add_files,
    baseline,
    comparison,
    new_table,
    run_threads,
)

from statestore import AddFiles, AssignJobIds, FileReference, JobAssignment, ReplaceFileReferences
from statestore.jobs import JobRecord
from statestore.postgres import PostgresStateStore


def select_one_baseline(dsn: str, seconds: float = 3.0) -> tuple[float, float]:
    """Trivial ``SELECT 1`` round trips/s, each thread on a connection of its own from the
    store's pool: from THREADS threads and from one."""
    with PostgresStateStore(dsn, max_connections=THREADS) as store, ExitStack() as stack:
        conns = [stack.enter_context(store.db.connection()) for _ in range(THREADS)]

        def select_one(i: int, seconds: float) -> int:
            n = 0
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                for _ in range(100):
                    conns[i].execute("SELECT 1").fetchone()
                n += 100
            return n

        return baseline(select_one, seconds)


def bench_small_commits(dsn: str, seconds: float = 6.0, *, with_jobs: bool = False,
                        jobs_per_thread: int = 6000) -> float:
    """(a); ``with_jobs``: each commit also saves its job's record, as compaction does
    (the records of the attempts are saved, untimed, before)."""
    backoff = CountingBackoff()
    store = PostgresStateStore(dsn, backoff=backoff, max_connections=THREADS)
    try:
        table_id, leaves = new_table(store, 64)
        inputs = 3
        refs = add_files(store, table_id, leaves, THREADS * jobs_per_thread * inputs, "in")
        # group inputs by partition into jobs of 3, assign job ids (setup, untimed)
        by_partition: dict[str, list[str]] = {}
        for r in refs:
            by_partition.setdefault(r.partition_id, []).append(r.filename)
        jobs = []
        for pid, names in by_partition.items():
            for i in range(0, len(names) - inputs + 1, inputs):
                jobs.append(JobAssignment(uuid.uuid4().hex, pid, tuple(names[i:i + inputs])))
        for i in range(0, len(jobs), 5000):
            store.commit(table_id, AssignJobIds(tuple(jobs[i:i + 5000])))
        per_thread = [jobs[i::THREADS] for i in range(THREADS)]
        records: dict[str, JobRecord] = {}
        if with_jobs:
            for job in jobs[:THREADS * jobs_per_thread // 2]:
                rec = JobRecord.created(table_id, job.job_id, "compaction").started(outputs=[f"out/{job.job_id}"])
                store.put_job(rec)
                records[job.job_id] = rec.finished(3000, 3000, f"out/{job.job_id}").committed()

        def compact(i: int) -> int:
            n = 0
            deadline = time.perf_counter() + seconds
            for job in per_thread[i]:
                if time.perf_counter() >= deadline:
                    break
                if with_jobs and job.job_id not in records:
                    break
                out = FileReference(f"out/{job.job_id}", job.partition_id, 3000)
                store.commit(table_id, ReplaceFileReferences(job.job_id, job.partition_id, job.filenames, out),
                             job=records.get(job.job_id))
                n += 1
            return n

        n, s = run_threads(THREADS, compact)
        what = "with their job records" if with_jobs else "no job records"
        print(f"(a) compaction commits on one table ({what}), {THREADS} threads: {n / s:,.0f} commits/s "
              f"({n} commits in {s:.1f} s, {backoff.retries} serialization retries)")
        return n / s
    finally:
        store.close()


def bench_large_commit(dsn: str, n: int = 100_000) -> tuple[float, float]:
    """(b) files/s of one AddFiles commit of ``n`` files, and (d) the seconds a fresh
    store takes to load them."""
    with PostgresStateStore(dsn) as store:
        table_id, leaves = new_table(store, 256)
        refs = tuple(FileReference(f"big/{uuid.uuid4().hex}.parquet", leaves[i % len(leaves)], 1000)
                     for i in range(n))
        txn = AddFiles(refs)
        t0 = time.perf_counter()
        store.commit(table_id, txn)
        s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with PostgresStateStore(dsn) as fresh:
            state = fresh.load_state(table_id)
        load_s = time.perf_counter() - t0
        assert len(state.references) == n
        print(f"(b) one AddFiles commit of {n:,} files: {s:.2f} s = {n / s:,.0f} files/s "
              f"(load_state of them in a fresh store: {load_s:.2f} s)")
        return n / s, load_s


def bench_commit_vs_size(dsn: str, sizes: tuple[int, ...] = (1_000, 100_000),
                         commits: int = 300) -> tuple[float, float]:
    """(c) the median seconds of a small commit with the first and the last of ``sizes``
    references in the table."""
    with PostgresStateStore(dsn) as store:
        medians = {}
        for size in sizes:
            table_id, leaves = new_table(store, 64)
            add_files(store, table_id, leaves, size, "existing")
            times = []
            for i in range(commits):
                pid = leaves[i % len(leaves)]
                names = (f"small/{uuid.uuid4().hex}", f"small/{uuid.uuid4().hex}")
                t0 = time.perf_counter()
                store.commit(table_id, AddFiles(tuple(FileReference(f, pid, 10) for f in names)))
                job = uuid.uuid4().hex
                store.commit(table_id, AssignJobIds((JobAssignment(job, pid, names),)))
                store.commit(table_id, ReplaceFileReferences(job, pid, names,
                                                             FileReference(f"small/{uuid.uuid4().hex}", pid, 20)))
                times.append((time.perf_counter() - t0) / 3)
            medians[size] = statistics.median(times)
        lo, hi = sizes[0], sizes[-1]
        print(f"(c) small commit (median of {3 * commits}): {medians[lo] * 1e3:.2f} ms with {lo:,} references, "
              f"{medians[hi] * 1e3:.2f} ms with {hi:,}; ratio {medians[hi] / medians[lo]:.2f}")
        return medians[lo], medians[hi]


def run_postgres(dsn: str, label: str, smoke: bool = False) -> Figures:
    """Every figure on the PostgreSQL server at ``dsn``, under ``label`` (``smoke``: tiny
    sizes and durations, figures that mean nothing)."""
    seconds = 0.3 if smoke else None
    timed = {} if seconds is None else {"seconds": seconds}
    base, base_1 = select_one_baseline(dsn, **timed)
    if smoke:
        timed["jobs_per_thread"] = 30
    f = Figures(label, "SELECT 1", base, base_1)
    print(f"baseline: SELECT 1: {base:,.0f} round trips/s from {THREADS} threads, {base_1:,.0f}/s from one")
    f.commits_per_s = bench_small_commits(dsn, **timed)
    f.commits_per_s_jobs = bench_small_commits(dsn, with_jobs=True, **timed)
    f.files_per_s, f.load_s = bench_large_commit(dsn, **({"n": 2_000} if smoke else {}))
    f.load_how = "load_state from its tables"
    f.commit_s_1k, f.commit_s_100k = bench_commit_vs_size(dsn, **({"sizes": (100, 1_000), "commits": 5} if smoke
                                                                   else {}))
    return f


def postgres(dsn: Optional[str], smoke: bool = False) -> Figures:
    """Every figure on PostgreSQL at ``dsn`` (None: an embedded server of its own)."""
    if dsn:
        return run_postgres(dsn, "PostgreSQL", smoke)
    from statestore.postgres.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="sleeper-bench-") as tmp:
        with EmbeddedPostgres(Path(tmp) / "pg", cleanup_mode="stop") as pg:
            print(f"embedded PostgreSQL in {tmp}")
            return run_postgres(pg.dsn, "PostgreSQL (embedded)", smoke)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("both", "postgres", "dynamodb"), default="both")
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: an embedded server in a temporary directory)")
    parser.add_argument("--endpoint-url", help="DynamoDB endpoint (default: a moto server started for the run)")
    parser.add_argument("--moto-txn", choices=("stock", "copy-once", "journal"), default="stock",
                        help="DynamoDB on moto: how its TransactWriteItems backs up what a cancelled transaction "
                             "puts back: a copy of each table per item (stock), of each table once "
                             "(bench/_moto_copy_once.py), or of the items it names, as DynamoDB's cost goes "
                             "(bench/_moto_txn_journal.py)")
    parser.add_argument("--moto-copy-once", action="store_const", dest="moto_txn", const="copy-once",
                        help="the same as --moto-txn copy-once")
    parser.add_argument("--smoke", action="store_true",
                        help="PostgreSQL only, tiny sizes, a few seconds: a check that the bench runs")
    args = parser.parse_args()
    if args.smoke:
        args.backend = "postgres"
    t0 = time.perf_counter()
    pg = dd = None
    if args.backend in ("both", "postgres"):
        print("== PostgreSQL ==", flush=True)
        pg = postgres(args.dsn, args.smoke)
    if args.backend in ("both", "dynamodb"):
        from _statestore_dynamodb import run_dynamodb

        print("== DynamoDB ==", flush=True)
        dd = run_dynamodb(args.endpoint_url, args.moto_txn)
    if pg is not None and dd is not None:
        print(f"\n== {dd.backend} against {pg.backend}, same run ==\n{comparison(pg, dd)}")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
