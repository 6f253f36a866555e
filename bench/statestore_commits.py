"""State store commit benchmark on PostgreSQL or DynamoDB (not a pass/fail test).

PostgreSQL (the default) prints, each taken in one run on one server:

(a) small compaction-style commits/s (ReplaceFileReferences: 3 inputs -> 1 output)
    on one table from 4 concurrent committer threads, against a baseline of trivial
    ``SELECT 1`` round trips/s from 4 threads on the same pool, as a ratio;
(b) files/s in one large AddFiles commit of 100k files;
(c) the time of a small commit on a table with 1k vs 100k existing references
    (the ratio should be about 1: commits cost O(size of the change)).

Usage: ``python bench/statestore_commits.py [--dsn DSN]``; without a DSN it starts an
embedded PostgreSQL in a temporary directory. Takes well under 2 minutes.

``--backend dynamodb`` measures the DynamoDB transaction-log store instead, against a
moto server it starts in a process of its own (or ``--endpoint-url``), with snapshots
in a temporary directory (:func:`run_dynamodb`). moto is far slower
than DynamoDB, so every figure is also given against moto's own plain PutItem rate
from the same number of threads, measured in the same run.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from statestore import (
    AddFiles,
    AssignJobIds,
    FileReference,
    JobAssignment,
    ReplaceFileReferences,
    Schema,
    StateStore,
    partitions_from_split_points,
)
from statestore.jobs import JobRecord
from statestore.postgres import PostgresStateStore
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


def bench_small_commits(dsn: str, seconds: float = 6.0, *, with_jobs: bool = False) -> None:
    """(a); ``with_jobs``: each commit also saves its job's record, as compaction does
    (the records of the attempts are saved, untimed, before)."""
    backoff = CountingBackoff()
    store = PostgresStateStore(dsn, backoff=backoff, max_connections=THREADS)
    try:
        table_id, leaves = new_table(store, 64)
        jobs_per_thread = 6000
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
            for job in jobs[:THREADS * 3000]:
                rec = JobRecord.created(table_id, job.job_id, "compaction").started(outputs=[f"out/{job.job_id}"])
                store.put_job(rec)
                records[job.job_id] = rec.finished(3000, 3000, f"out/{job.job_id}").committed()

        def select_one(i: int) -> int:
            n = 0
            deadline = time.perf_counter() + seconds / 2
            with store._connection() as conn:
                while time.perf_counter() < deadline:
                    for _ in range(100):
                        conn.execute("SELECT 1").fetchone()
                    n += 100
            return n

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

        base_n, base_s = run_threads(THREADS, select_one)
        n, s = run_threads(THREADS, compact)
        base_rate, rate = base_n / base_s, n / s
        what = "with their job records" if with_jobs else "no job records"
        print(f"(a) compaction commits on one table ({what}), {THREADS} threads: {rate:,.0f} commits/s "
              f"({n} commits in {s:.1f} s, {backoff.retries} serialization retries); "
              f"SELECT 1 baseline {base_rate:,.0f} round trips/s; ratio commits/round trips = {rate / base_rate:.3f}")
    finally:
        store.close()


def bench_large_commit(dsn: str, n: int = 100_000) -> None:
    with PostgresStateStore(dsn) as store:
        table_id, leaves = new_table(store, 256)
        refs = tuple(FileReference(f"big/{uuid.uuid4().hex}.parquet", leaves[i % len(leaves)], 1000)
                     for i in range(n))
        txn = AddFiles(refs)
        t0 = time.perf_counter()
        store.commit(table_id, txn)
        s = time.perf_counter() - t0
        t0 = time.perf_counter()
        state = store.load_state(table_id)
        load_s = time.perf_counter() - t0
        assert len(state.references) == n
        print(f"(b) one AddFiles commit of {n:,} files: {s:.2f} s = {n / s:,.0f} files/s "
              f"(load_state of them: {load_s:.2f} s)")


def bench_commit_vs_size(dsn: str, sizes: tuple[int, ...] = (1_000, 100_000), commits: int = 300) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("postgres", "dynamodb"), default="postgres")
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: an embedded server in a temporary directory)")
    parser.add_argument("--endpoint-url", help="DynamoDB endpoint (default: a moto server started for the run)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    if args.backend == "dynamodb":
        run_dynamodb(args.endpoint_url)
    elif args.dsn:
        dsn = args.dsn
        run(dsn)
    else:
        from statestore.postgres.embedded import EmbeddedPostgres
        with tempfile.TemporaryDirectory(prefix="sleeper-bench-") as tmp:
            with EmbeddedPostgres(Path(tmp) / "pg", cleanup_mode="stop") as pg:
                print(f"embedded PostgreSQL in {tmp}")
                run(pg.dsn)
    print(f"total {time.perf_counter() - t0:.0f} s")


# ----- DynamoDB ----------------------------------------------------------------------------
MOTO_KEYS = {"access_key": "test", "secret_key": "test", "region": "us-east-1"}


def _moto_server() -> tuple[subprocess.Popen[bytes], str]:
    """A moto server in a process of its own (so it does not share the GIL with the
    committers), answering one request at a time."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # One request at a time: moto's TransactWriteItems restores whole tables when a
    # transaction is cancelled, wiping concurrent writes, so a threaded server loses commits.
    serve = ("from werkzeug.serving import run_simple; "
             "from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app; "
             f"run_simple('127.0.0.1', {port}, DomainDispatcherApplication(create_backend_app), threaded=False)")
    proc = subprocess.Popen([sys.executable, "-c", serve], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto server did not start")


def put_item_baseline(endpoint: str, seconds: float = 4.0) -> float:
    """moto's plain PutItem rate (small items, one table) from THREADS threads."""
    from statestore.dynamodb.connection import Dynamo, DynamoOptions

    d = Dynamo(DynamoOptions(endpoint_url=endpoint, table_prefix=f"base{uuid.uuid4().hex[:6]}-", **MOTO_KEYS))
    table = d.table("leases")

    def put(i: int) -> int:
        k = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            d.client.put_item(TableName=table, Item={"name": {"S": f"{i}-{k}"}, "holder": {"S": "x" * 40}})
            k += 1
        return k

    n, s = run_threads(THREADS, put)
    return n / s


def run_dynamodb(endpoint: Optional[str]) -> None:
    proc = None
    if endpoint is None:
        proc, endpoint = _moto_server()
        print(f"moto server at {endpoint}")
    try:
        with tempfile.TemporaryDirectory(prefix="sleeper-bench-blobs-") as blobs:
            _bench_dynamodb(endpoint, blobs)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)


def _bench_dynamodb(endpoint: str, blobs: str) -> None:
    from statestore.dynamodb import open_dynamodb

    prefix = f"bench{uuid.uuid4().hex[:6]}-"

    def store(**kw: Any) -> Any:
        return open_dynamodb(endpoint_url=endpoint, table_prefix=prefix, object_store=blobs, **MOTO_KEYS, **kw)

    base = put_item_baseline(endpoint)
    print(f"baseline: moto PutItem, {THREADS} threads: {base:,.0f} items/s")

    # (a) small compaction commits from THREADS committers, each a store of its own (as processes would be)
    setup = store()
    table_id, leaves = new_table(setup, 16)
    refs = add_files(setup, table_id, leaves, THREADS * 400 * 3, "in")
    by_partition: dict[str, list[str]] = {}
    for r in refs:
        by_partition.setdefault(r.partition_id, []).append(r.filename)
    jobs = [JobAssignment(uuid.uuid4().hex, pid, tuple(names[i:i + 3]))
            for pid, names in by_partition.items() for i in range(0, len(names) - 2, 3)]
    setup.commit(table_id, AssignJobIds(tuple(jobs)))
    committers = [store(backoff=CountingBackoff()) for _ in range(THREADS)]
    for c in committers:
        c.load_state(table_id)
    per_thread = [jobs[i::THREADS] for i in range(THREADS)]

    def compact(i: int, seconds: float = 6.0) -> int:
        k = 0
        deadline = time.perf_counter() + seconds
        for job in per_thread[i]:
            if time.perf_counter() >= deadline:
                break
            committers[i].commit(table_id, ReplaceFileReferences(
                job.job_id, job.partition_id, job.filenames, FileReference(f"out/{job.job_id}", job.partition_id, 3)))
            k += 1
        return k

    n, s = run_threads(THREADS, compact)
    retries = sum(c._backoff.retries for c in committers)
    print(f"(a) compaction commits on one table, {THREADS} committers: {n / s:,.1f} commits/s ({n} in {s:.1f} s, "
          f"{retries} lost races retried); ratio commits/PutItems = {n / s / base:.3f}")

    # (b) one AddFiles commit of 100k files (its body goes to the object store)
    big = store()
    table_id, leaves = new_table(big, 256)
    txn = AddFiles(tuple(FileReference(f"big/{uuid.uuid4().hex}.parquet", leaves[i % len(leaves)], 1000)
                         for i in range(100_000)))
    t0 = time.perf_counter()
    big.commit(table_id, txn)
    s = time.perf_counter() - t0
    print(f"(b) one AddFiles commit of 100,000 files: {s:.2f} s = {100_000 / s:,.0f} files/s")

    # (d) a fresh process loading 100k references: from the log alone, then from a snapshot plus a tail of 20
    t0 = time.perf_counter()
    assert len(store().load_state(table_id).references) == 100_000
    from_log = time.perf_counter() - t0
    big.snapshot(table_id)
    for i in range(20):
        big.commit(table_id, AddFiles((FileReference(f"tail/{i}", leaves[0], 1),)))
    t0 = time.perf_counter()
    reader = store()
    assert len(reader.load_state(table_id).references) == 100_020
    from_snapshot = time.perf_counter() - t0
    t0 = time.perf_counter()
    reader.load_state(table_id)
    cached = time.perf_counter() - t0
    print(f"(d) load 100k references in a fresh store: {from_snapshot:.2f} s from a snapshot + 20 transactions "
          f"({from_log:.2f} s from the log's one 100k-file transaction); again when cached: {cached * 1e3:.1f} ms "
          f"(one tail query + a copy)")

    # (c) a small commit with 1k vs 100k references in the table (the committer holds the state)
    medians = {}
    for size in (1_000, 100_000):
        if size == 100_000:
            tid, lv, st = table_id, leaves, big
        else:
            st = store()
            tid, lv = new_table(st, 64)
            add_files(st, tid, lv, size, "existing")
        times = []
        for i in range(40):
            pid = lv[i % len(lv)]
            names = (f"small/{uuid.uuid4().hex}", f"small/{uuid.uuid4().hex}")
            job = uuid.uuid4().hex
            t0 = time.perf_counter()
            st.commit(tid, AddFiles(tuple(FileReference(f, pid, 10) for f in names)))
            st.commit(tid, AssignJobIds((JobAssignment(job, pid, names),)))
            st.commit(tid, ReplaceFileReferences(job, pid, names, FileReference(f"small/{uuid.uuid4().hex}", pid, 20)))
            times.append((time.perf_counter() - t0) / 3)
        medians[size] = statistics.median(times)
    print(f"(c) small commit (median of 120): {medians[1_000] * 1e3:.2f} ms with 1,000 references, "
          f"{medians[100_000] * 1e3:.2f} ms with 100,000; ratio {medians[100_000] / medians[1_000]:.2f} "
          f"(one PutItem: {THREADS / base * 1e3:.2f} ms)")


def run(dsn: str) -> None:
    bench_small_commits(dsn)
    bench_small_commits(dsn, with_jobs=True)
    bench_large_commit(dsn)
    bench_commit_vs_size(dsn)


if __name__ == "__main__":
    main()
