"""Compaction faults on PostgreSQL: a process killed mid-write, and racing attempts.

The killed process leaves its job's inputs assigned and a half-written output
under a fresh name; nothing is lost, the next run retries the job to success, and
the orphan sweep removes the half-written file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.compaction.execute import run_job
from sleeper_ops.compaction.jobs import create_compaction_jobs
from sleeper_ops.io.storage import ObjectStore
from statestore.postgres import PostgresStateStore

pytestmark = pytest.mark.integration

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}],
          "valueFields": [{"name": "id", "type": "LongType"}]}
HELPERS = Path(__file__).parent / "compaction_helpers"


def _rows(n: int, first_id: int) -> pa.Table:
    import numpy as np

    rng = np.random.default_rng(first_id)
    return pa.table({"key": pa.array(rng.integers(0, 1_000_000, n), pa.int64()),
                     "id": pa.array(np.arange(first_id, first_id + n), pa.int64())})


def _ids(t) -> Counter:
    return Counter(t.query(ranges=[(-(2**63), None)]).column("id").to_pylist())


@pytest.fixture
def pg_sleeper(pg_dsn, tmp_path):
    s = Sleeper(state_store=PostgresStateStore(pg_dsn), objects=ObjectStore(str(tmp_path / "data")),
                python_iterator_modules=("pausing_iterator",))
    yield s
    s.close()


_CHILD = """
import sys
sys.path.insert(0, {helpers!r})
from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from statestore.postgres import PostgresStateStore
s = Sleeper(state_store=PostgresStateStore({dsn!r}), objects=ObjectStore({root!r}),
            python_iterator_modules=("pausing_iterator",))
print(s.table("t").compact(run_id="doomed").summary(), flush=True)
"""


def test_compaction_killed_mid_write_loses_nothing_and_is_retried(pg_sleeper, pg_dsn, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))
    t = pg_sleeper.create_table("t", SCHEMA, properties={
        "sleeper.table.iterator.python": "pausing_iterator:pause",
        "sleeper.table.parquet.rowgroup.rows.max": "1000"})
    for i in range(3):
        t.ingest(_rows(100_000, i * 1_000_000))
    before = _ids(t)
    inputs = set(t.state().files)

    pause_dir = tmp_path / "pause"
    pause_dir.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(helpers=str(HELPERS), dsn=pg_dsn,
                                             root=pg_sleeper.objects.root)],
        env={**os.environ, "SLEEPER_TEST_PAUSE_DIR": str(pause_dir)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (pause_dir / "paused").exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the compaction never reached its second batch"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()

    data_objects = {o.key for o in pg_sleeper.objects.list(t.info.table_id) if o.key.endswith(".parquet")}
    half_written = data_objects - inputs
    assert len(half_written) == 1, "the killed job left its partial output behind"
    state = t.state()
    assert set(state.files) == inputs and all(r.job_id for r in state.references.values()), \
        "the killed job committed nothing: its inputs are still assigned to it"
    assert _ids(t) == before

    report = t.compact(retry_after_minutes=0)
    assert report.creation.retried == 1 and report.count("committed") == 1, report.summary()
    assert _ids(t) == before
    job = t.jobs(kind="compaction")[0]
    assert job.status == "committed" and job.attempts == 2 and job.rows_written == 300_000

    from sleeper_ops.maintenance.gc import sweep_orphans

    swept = sweep_orphans(pg_sleeper.state_store, pg_sleeper.objects, t.info, grace_minutes=0)
    assert half_written <= set(swept)
    assert all(pg_sleeper.objects.head(k) is None for k in half_written)
    live = t.state().references.values()
    assert all(pg_sleeper.objects.head(r.filename) is not None for r in live)
    assert _ids(t) == before


def test_racing_attempts_on_postgres_exactly_one_commits(pg_sleeper):
    t = pg_sleeper.create_table("t", SCHEMA)
    for i in range(3):
        t.ingest(_rows(20_000, i * 1_000_000))
    before = _ids(t)
    (job,) = create_compaction_jobs(pg_sleeper.state_store, t.info).jobs
    barrier = threading.Barrier(4)
    results = []

    def attempt() -> None:
        barrier.wait()
        results.append(run_job(pg_sleeper.state_store, pg_sleeper.objects, t.info, job))

    threads = [threading.Thread(target=attempt) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(r.status for r in results) == ["committed", "refused", "refused", "refused"]
    assert _ids(t) == before
    assert len(t.state().references) == 1
    assert t.jobs()[0].status == "committed"


def test_a_compaction_slower_than_the_grace_period_keeps_its_output_while_gc_sweeps(pg_sleeper):
    """Issue 9 item 1: the orphan sweep used to delete a job's output written but not yet
    committed once older than the grace period, and the commit then referenced a
    deleted file. Here GC sweeps (as if three hours later) while the job is paused
    half way through writing; the output survives and the commit keeps every record."""
    t = pg_sleeper.create_table("t", SCHEMA, properties={"sleeper.table.compaction.strategy": "basic",
                                                         "sleeper.table.parquet.rowgroup.rows.max": "1000"})
    for i in range(3):
        t.ingest(_rows(20_000, i * 1_000_000))
    before = _ids(t)
    paused, release = threading.Event(), threading.Event()
    seen = [0]

    def gate(batch):
        seen[0] += 1
        if seen[0] == 3:
            paused.set()
            assert release.wait(60), "the test never released the job"
        return batch

    reports = []
    worker = threading.Thread(target=lambda: reports.append(t.compact(iterators=[gate])))
    worker.start()
    assert paused.wait(60), "the job never reached its pause"
    tracked = set(t.state().files)
    in_flight = [o.key for o in pg_sleeper.objects.list(t.info.table_id)
                 if o.key.endswith(".parquet") and o.key not in tracked]
    assert in_flight, "the job's output is on storage, half written"
    later = int(time.time() * 1000) + 3 * 60 * 60_000  # three hours on: past the 60-minute grace
    gc = t.gc(now_ms=later)
    release.set()
    worker.join(60)
    assert not [k for k in in_flight if k in gc.orphans_deleted], "the sweep deleted a job's output in flight"
    assert reports and reports[0].count("committed") == 1, reports[0].summary() if reports else "no report"
    state = t.state()
    assert all(pg_sleeper.objects.head(f) is not None for f in state.files)
    assert _ids(t) == before and len(before) == 60_000
