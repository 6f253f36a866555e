"""The DynamoDB half of bench/statestore_commits.py: the transaction-log store against a
moto server started in a process of its own (or any endpoint), snapshots and large
bodies in a temporary directory. moto is far slower than DynamoDB, so every figure is
also taken against moto's own plain PutItem rate, measured in the same run.

moto's TransactWriteItems deep-copies the table of every item a transaction names
(to restore them if it is cancelled) -- once per item, not once per table -- so on moto
a commit costs more the more items the log and items tables hold and the more items
it writes, which DynamoDB's does not: each measurement gets DynamoDB tables of its
own (a fresh name prefix), holding only what it needs. ``--moto-txn copy-once`` makes
the bench's moto server copy each table once per transaction (bench/_moto_copy_once.py),
``--moto-txn journal`` back up only the items a transaction names, as DynamoDB's cost
goes (bench/_moto_txn_journal.py).
Small commits are measured each racing for the log, then through group commit
(statestore.dynamodb.group_commit)."""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

from _statestore_common import THREADS, CountingBackoff, Figures, add_files, baseline, new_table, run_threads

from statestore import AddFiles, AssignJobIds, FileReference, JobAssignment, ReplaceFileReferences
from statestore.jobs import JobRecord

MOTO_KEYS = {"access_key": "test", "secret_key": "test", "region": "us-east-1"}


#: how the bench's moto server backs up a transaction: moto's own way, or a patch module of bench/
MOTO_TXN = {"stock": None, "copy-once": "_moto_copy_once", "journal": "_moto_txn_journal"}


def _moto_server(txn: str = "stock") -> tuple[subprocess.Popen[bytes], str]:
    """A moto server in a process of its own (so it does not share the GIL with the
    committers), answering one request at a time; ``txn`` (:data:`MOTO_TXN`): how its
    TransactWriteItems backs up what it may have to put back."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # One request at a time: moto's TransactWriteItems restores whole tables when a
    # transaction is cancelled, wiping concurrent writes, so a threaded server loses commits.
    module = MOTO_TXN[txn]
    patch = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
             f"import {module}; {module}.install(); ") if module else ""
    serve = (patch + "from werkzeug.serving import run_simple; "
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


def run_dynamodb(endpoint: Optional[str], moto_txn: str = "stock") -> Figures:
    """Every figure on DynamoDB at ``endpoint`` (None: a moto server of its own, see
    :func:`_moto_server` for ``moto_txn``)."""
    proc = None
    if endpoint is None:
        proc, endpoint = _moto_server(moto_txn)
        how = {"stock": "stock", "copy-once": "TransactWriteItems copying each table once",
               "journal": "TransactWriteItems backing up only the items it names"}[moto_txn]
        print(f"moto server at {endpoint} ({how})")
    try:
        with tempfile.TemporaryDirectory(prefix="sleeper-bench-blobs-") as blobs:
            return _bench_dynamodb(endpoint, blobs, label="DynamoDB (moto)" if proc else "DynamoDB")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)


def _put_item_baseline(endpoint: str, seconds: float = 3.0) -> tuple[float, float]:
    """moto's plain PutItem rate (small items, one table), THREADS threads and one."""
    from statestore.dynamodb.connection import Dynamo, DynamoOptions

    d = Dynamo(DynamoOptions(endpoint_url=endpoint, table_prefix=f"base{uuid.uuid4().hex[:6]}-", **MOTO_KEYS))
    table = d.table("leases")

    def put(i: int, seconds: float) -> int:
        k = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            d.client.put_item(TableName=table, Item={"name": {"S": f"{i}-{k}"}, "holder": {"S": "x" * 40}})
            k += 1
        return k

    return baseline(put, seconds)


def _bench_small_commits(store: Callable[..., Any], with_jobs: bool, seconds: float = 6.0,
                         group: bool = False) -> float:
    """(a): small compaction commits/s from THREADS committers on one table, each a
    store of its own (as processes would be); ``group``: through group commit
    (statestore.dynamodb.group_commit), else each commit racing for the log itself."""
    setup = store()
    table_id, leaves = new_table(setup, 16)
    per_thread_jobs = 250 if with_jobs else 400
    refs = add_files(setup, table_id, leaves, THREADS * per_thread_jobs * 3, "in")
    by_partition: dict[str, list[str]] = {}
    for r in refs:
        by_partition.setdefault(r.partition_id, []).append(r.filename)
    jobs = [JobAssignment(uuid.uuid4().hex, pid, tuple(names[i:i + 3]))
            for pid, names in by_partition.items() for i in range(0, len(names) - 2, 3)]
    setup.commit(table_id, AssignJobIds(tuple(jobs)))
    records: dict[str, JobRecord] = {}
    if with_jobs:  # the records of the attempts are saved, untimed, before
        for job in jobs:
            rec = JobRecord.created(table_id, job.job_id, "compaction").started(outputs=[f"out/{job.job_id}"])
            setup.put_job(rec)
            records[job.job_id] = rec.finished(3, 3, f"out/{job.job_id}").committed()
    committers = [store(backoff=CountingBackoff(), group_commit=group) for _ in range(THREADS)]
    for c in committers:
        c.load_state(table_id)
    per_thread = [jobs[i::THREADS] for i in range(THREADS)]

    def compact(i: int) -> int:
        k = 0
        deadline = time.perf_counter() + seconds
        for job in per_thread[i]:
            if time.perf_counter() >= deadline:
                break
            committers[i].commit(table_id, ReplaceFileReferences(
                job.job_id, job.partition_id, job.filenames, FileReference(f"out/{job.job_id}", job.partition_id, 3)),
                job=records.get(job.job_id))
            k += 1
        return k

    n, s = run_threads(THREADS, compact)
    if n == len(jobs):
        print(f"    (ran out of jobs after {s:.1f} s: the rate is a lower bound)")
    retries = sum(c._backoff.retries for c in committers)
    what = ("with their job records" if with_jobs else "no job records") + (", group commit" if group else "")
    print(f"(a) compaction commits on one table ({what}), {THREADS} committers: {n / s:,.1f} commits/s "
          f"({n} in {s:.1f} s, {retries} lost races retried)")
    return n / s


def _bench_dynamodb(endpoint: str, blobs: str, many: int = 100_000, label: str = "DynamoDB (moto)") -> Figures:
    """Every figure, ``many`` references standing for 100k (smaller for a quick try)."""
    from statestore.dynamodb import open_dynamodb

    def tables() -> Callable[..., Any]:
        """A factory of stores on DynamoDB tables of their own (see the module docstring)."""
        prefix = f"bench{uuid.uuid4().hex[:6]}-"
        return lambda **kw: open_dynamodb(endpoint_url=endpoint, table_prefix=prefix, object_store=blobs,
                                          **MOTO_KEYS, **kw)

    base, base_1 = _put_item_baseline(endpoint)
    f = Figures(label, "PutItem", base, base_1)
    print(f"baseline: moto PutItem: {base:,.0f} items/s from {THREADS} threads, {base_1:,.0f}/s from one")
    single = _bench_small_commits(tables(), with_jobs=False)
    single_jobs = _bench_small_commits(tables(), with_jobs=True)
    f.commits_per_s = _bench_small_commits(tables(), with_jobs=False, group=True)
    f.commits_per_s_jobs = _bench_small_commits(tables(), with_jobs=True, group=True)
    print(f"    group commit against single commits: {f.commits_per_s / single:.1f}x (no job records), "
          f"{f.commits_per_s_jobs / single_jobs:.1f}x (with them); per PutItem from {THREADS} threads: "
          f"{f.commits_per_s / base:.2f} and {f.commits_per_s_jobs / base:.2f}")

    # (b) one AddFiles commit of 100k files (its body goes to the object store)
    store = tables()
    big = store(group_commit=False)  # single commits (the 100k-file commit would be one anyway)
    table_id, leaves = new_table(big, 256)
    txn = AddFiles(tuple(FileReference(f"big/{uuid.uuid4().hex}.parquet", leaves[i % len(leaves)], 1000)
                         for i in range(many)))
    t0 = time.perf_counter()
    big.commit(table_id, txn)
    s = time.perf_counter() - t0
    f.files_per_s = many / s
    print(f"(b) one AddFiles commit of {many:,} files: {s:.2f} s = {f.files_per_s:,.0f} files/s")

    # (d) a fresh store loading 100k references: from the log alone, then from a snapshot plus a tail of 20
    t0 = time.perf_counter()
    assert len(store().load_state(table_id).references) == many
    from_log = time.perf_counter() - t0
    big.snapshot(table_id)
    for i in range(20):
        big.commit(table_id, AddFiles((FileReference(f"tail/{i}", leaves[0], 1),)))
    t0 = time.perf_counter()
    reader = store()
    assert len(reader.load_state(table_id).references) == many + 20
    f.load_s = time.perf_counter() - t0
    f.load_how = "a snapshot + a tail of 20 transactions"
    t0 = time.perf_counter()
    reader.load_state(table_id)
    cached = time.perf_counter() - t0
    print(f"(d) load 100k references in a fresh store: {f.load_s:.2f} s from a snapshot + 20 transactions "
          f"({from_log:.2f} s from the log's one 100k-file transaction); again when cached: {cached * 1e3:.1f} ms "
          f"(one tail query + a copy)")

    # (c) a small commit with 1k vs 100k references in the table (the committer holds the state),
    # and a lone committer's with group commit on (alone, it makes single commits:
    # statestore.dynamodb.contention)
    def small_commits(st: Any, tid: str, lv: list[str]) -> float:
        times = []
        for i in range(40):
            pid = lv[i % len(lv)]
            names = (f"small/{uuid.uuid4().hex}", f"small/{uuid.uuid4().hex}")
            job = uuid.uuid4().hex
            t0 = time.perf_counter()
            st.commit(tid, AddFiles(tuple(FileReference(name, pid, 10) for name in names)))
            st.commit(tid, AssignJobIds((JobAssignment(job, pid, names),)))
            st.commit(tid, ReplaceFileReferences(job, pid, names, FileReference(f"small/{uuid.uuid4().hex}", pid, 20)))
            times.append((time.perf_counter() - t0) / 3)
        return statistics.median(times)

    def fresh(group_commit: bool) -> tuple[Any, str, list[str]]:
        """A store on tables of their own (moto's queries and copies grow with its tables)
        holding a table of 1,000 references."""
        st = tables()(group_commit=group_commit)
        tid, lv = new_table(st, 64)
        add_files(st, tid, lv, 1_000, "existing")
        return st, tid, lv

    medians = {many: small_commits(big, table_id, leaves), 1_000: small_commits(*fresh(False))}
    lone = small_commits(*fresh(True))
    f.commit_s_1k, f.commit_s_100k = medians[1_000], medians[many]
    print(f"(c) small commit (median of 120): {medians[1_000] * 1e3:.2f} ms with 1,000 references, "
          f"{medians[many] * 1e3:.2f} ms with {many:,}; ratio {medians[many] / medians[1_000]:.2f} "
          f"(one PutItem from one thread: {1e3 / base_1:.2f} ms); a lone committer with group commit on: "
          f"{lone * 1e3:.2f} ms with 1,000 references")
    return f
