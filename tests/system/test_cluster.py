"""Issue 20: the scaled-out shape run as one, under kills.

``sleeper cluster`` (in process, to hold each piece's handle) with DynamoDB and S3 on
moto, Airflow on Celery and the standing Spark cluster. On one table:

* the dated bulk import DAG backfilled over 4 dates with ``POST /api/v2/backfills``
  (each date's input in S3, imported on the Spark service);
* 2 REST writers writing through the write buffer, each request with an
  ``Idempotency-Key`` and sent again with it until acknowledged;
* the flush DAG on its buffer asset, compaction on the table's asset (the ``basic``
  strategy, so any two files make a job), split and GC every minute.

During the run, each on an event seen through the APIs (never on a sleep): a Celery
worker is SIGKILLed (with all it forked) while a compaction ``run_local`` task runs on
it, a Spark worker (with its executor) while a bulk import job runs on the Spark
service, and the scheduler is restarted once the first date is imported.

At the end every DAG is paused and every run must be in a terminal state; GC runs as of
when the delays have passed (the killed job's untracked output is an orphan until its
grace has), and then: every acknowledged record and every imported record is in the
table exactly once, every date was imported by one committed job, and the bucket holds
exactly the files the table references (history retention 0). The timeline of each
kill and of what recovered it is printed.
"""

from __future__ import annotations

import io
import shutil
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cluster_helpers import airflow_client, cluster_work_dir, poll, processes_using

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TABLE = "kills"
DATES = ("2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04")
ROWS_PER_DATE = 1000
WRITERS = 2
BATCH = 25
#: seconds without a heartbeat before the scheduler fails a task whose worker died
HEARTBEAT_TIMEOUT = 15
WORK_TIMEOUT = 240.0
#: compaction tasks seen running whose job ended before the kill could land, before the
#: Celery worker is killed at any moment of the task
MISSES_BEFORE_ANY_MOMENT = 3
DAG_OPS = ("bulk_import", "flush", "compaction", "split", "gc")
PROPERTIES = {
    "sleeper.table.bulk.import.source": "s3://sleeper-data/raw/{{ data_interval_start | ds }}/",
    "sleeper.table.bulk.import.min.leaf.partitions": "2",
    "sleeper.table.schedule.flush": "none",  # on the buffer asset alone
    "sleeper.table.write.buffer.flush.records": "100",
    "sleeper.table.write.buffer.flush.age.seconds": "5",
    "sleeper.table.schedule.compaction": "0 0 1 1 *",  # in effect on the table's asset alone
    "sleeper.table.compaction.strategy": "basic",
    "sleeper.table.compaction.files.batch.size": "4",
    "sleeper.table.schedule.split": "* * * * *",
    "sleeper.table.partition.splitting.threshold": "3000",
    "sleeper.table.schedule.gc": "* * * * *",
    "sleeper.table.gc.delay.minutes": "1",
    "sleeper.table.history.retention.minutes": "0",
    "sleeper.table.gc.orphan.grace.minutes": "10",
    "sleeper.table.gc.job.abandon.minutes": "10",
    "sleeper.table.compaction.job.retry.minutes": "5",
    "sleeper.table.schedule.ingest_batcher": "none",
}
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}], "valueFields": [{"name": "n", "type": "LongType"}]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The whole shape, started in this process; at the end, stopped with nothing left."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (make redis)")
    from sleeper_ops.cluster.run import running_cluster
    from sleeper_ops.spark.cluster import free_port

    work = cluster_work_dir(tmp_path_factory, "cluster-kills")
    started = time.monotonic()
    with running_cluster(work / "w", state_store="dynamodb", api_port=free_port(), spark=True,
                         timeout=240.0, task_heartbeat_timeout=HEARTBEAT_TIMEOUT) as c:
        print(f"cluster ready in {time.monotonic() - started:.1f} s")
        yield c
    left = processes_using(str(work / "w"))
    assert left == [], f"processes left behind by the cluster: {left}"
    shutil.rmtree(work, ignore_errors=True)


class Timeline:
    """(elapsed seconds, event) lines, printed at the end."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.events: list[tuple[float, str]] = []

    def __call__(self, event: str) -> None:
        self.events.append((time.monotonic() - self.start, event))

    def text(self) -> str:
        return "\n".join(f"{t:7.1f} s  {e}" for t, e in self.events)


class Writer(threading.Thread):
    """Writes batches of ``BATCH`` new records over REST until stopped, each request with
    its own ``Idempotency-Key``, sent again with it (same body) until acknowledged (201)."""

    def __init__(self, n: int, api: str, password: str, stop: threading.Event) -> None:
        super().__init__(name=f"writer-{n}", daemon=True)
        self.n, self.api, self.password, self.stop = n, api, password, stop
        self.acked: list[str] = []
        self.resent = 0
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            client = airflow_client(self.api, self.password)
            try:
                batch = 0
                while not self.stop.is_set():
                    keys = [f"w{self.n}-{batch:04d}-{i:02d}" for i in range(BATCH)]
                    body = {"records": [{"key": k, "n": self.n} for k in keys]}
                    self._send(client, f"writer-{self.n}-batch-{batch}", body)
                    self.acked += keys
                    batch += 1
                    self.stop.wait(1.0)
            finally:
                client.close()
        except BaseException as e:  # reported by the test
            self.error = e

    def _send(self, client: httpx.Client, key: str, body: dict[str, Any]) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = client.post(f"/sleeper/api/v1/tables/{TABLE}/records", json=body,
                                headers={"Idempotency-Key": key})
                if r.status_code == 201:
                    return
                assert r.status_code in (409, 429, 503), f"{key}: {r.status_code} {r.text}"
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{key} never acknowledged"
            self.resent += 1
            time.sleep(0.5)


def _put_inputs(layout: Any) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=layout.aws_endpoint, region_name=layout.aws_region,
                      aws_access_key_id=layout.aws_access_key, aws_secret_access_key=layout.aws_secret_key)
    for day in DATES:
        rows = pa.table({"key": [f"d{day}-{i:05d}" for i in range(ROWS_PER_DATE)],
                         "n": pa.array(range(ROWS_PER_DATE), pa.int64())})
        buf = io.BytesIO()
        pq.write_table(rows, buf)
        s3.put_object(Bucket=layout.bucket, Key=f"raw/{day}/part-0.parquet", Body=buf.getvalue())


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        out.append(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rfind(")") + 2:].split()[1])
    return out


class Chaos:
    """The three faults, each fired once on an event, and what recovered each."""

    def __init__(self, cluster: Any, client: httpx.Client, log: Timeline, jobs: Callable[[], list[Any]]) -> None:
        self.cluster, self.client, self.log, self.jobs = cluster, client, log, jobs
        self.missed = 0
        self.celery_killed: Optional[tuple[str, str, str]] = None  # worker, run id, try
        self.celery_done = False
        self.spark_killed_at: Optional[float] = None
        self.spark_done = False
        self.scheduler_restarted_at: Optional[datetime] = None
        self.scheduler_done = False
        self.worker_lost_seen = False

    @property
    def done(self) -> bool:
        return self.celery_done and self.spark_done and self.scheduler_done

    def step(self, imported: int) -> None:
        self._celery()
        self._spark()
        self._scheduler(imported)

    # a Celery worker, while a compaction job runs on it
    def _celery(self) -> None:
        dag = f"sleeper_{TABLE}_compaction"
        if self.celery_killed is None:
            running = self._running_tasks()
            for ti, worker in running:
                if ti["dag_id"] != dag or ti["task_id"] != "run_local":
                    continue
                # a dated import's task killed retries after its retry delay (2 min): longer than this test
                if any(w == worker and t["dag_id"].endswith("_bulk_import") for t, w in running):
                    continue
                what = self._job_started(f"{dag}/{ti['dag_run_id']}")
                if what is None:
                    self.missed += 1
                    if self.missed < MISSES_BEFORE_ANY_MOMENT:
                        continue
                    what = "before its job started (its jobs were too quick to catch)"
                also = [f"{t['dag_id']}.{t['task_id']}" for t, w in self._running_tasks() if w == worker and t != ti
                        and t["task_id"] != "run_local"]
                self.cluster.kill(worker)
                self.celery_killed = (worker, ti["dag_run_id"], str(ti["try_number"]))
                self.log(f"SIGKILL {worker} (its Celery pool and task processes) while run_local of compaction run "
                         f"{ti['dag_run_id']} ran on it (task pid {ti['pid']}), {what}"
                         + (f"; it also ran {', '.join(also)}" if also else ""))
                return
            return
        if self.celery_done:
            return
        name, run_id, _ = self.celery_killed
        tis = self.client.get(f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances").json()["task_instances"]
        states = {ti["task_id"]: ti["state"] for ti in tis}
        if states.get("run_local") in ("failed", "success") and not getattr(self, "_failed_seen", False):
            self._failed_seen = True
            self.log(f"the scheduler marked the killed run_local {states['run_local']} (no heartbeat for "
                     f"{HEARTBEAT_TIMEOUT} s); restarting {name}")
            self.cluster.restart(name, kill=True)
        if getattr(self, "_failed_seen", False) and states.get("report") in ("success", "failed", "skipped"):
            ready = "ready" in self.cluster.piece(name).log.read_text(errors="replace").rsplit("restarted ---", 1)[-1]
            if ready:
                self.log(f"the run's teardown report ended {states['report']} on the other worker (the compaction "
                         f"lease released); {name} is back (Celery worker ready)")
                self.celery_done = True

    def _running_tasks(self) -> list[tuple[dict[str, Any], str]]:
        """The table's running task instances with the Celery worker each runs on."""
        r = self.client.get("/api/v2/dags/~/dagRuns/~/taskInstances", params={"state": "running", "limit": 100})
        out = []
        for ti in r.json().get("task_instances", []) if r.status_code == 200 else []:
            if not ti["dag_id"].startswith(f"sleeper_{TABLE}_") or not ti.get("pid"):
                continue
            chain = _ancestors(int(ti["pid"]))
            worker = next((n for n in ("airflow worker-1", "airflow worker-2")
                           if self.cluster.piece(n).process.pid in chain), None)
            if worker is not None:
                out.append((ti, worker))
        return out

    def _job_started(self, run_label: str) -> Optional[str]:
        """Poll the state store until a compaction job of ``run_label`` is started (then
        say which) or none of them can be any more (None)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            jobs = [j for j in self.jobs() if j.run_id == run_label]
            started = [j for j in jobs if j.status == "started"]
            if started:
                return f"its compaction job {started[0].job_id} started (outputs named: {len(started[0].outputs)})"
            if jobs and all(j.status in ("finished", "committed", "failed") for j in jobs):
                return None
            time.sleep(0.1)
        return None

    # a Spark worker, while a bulk import job runs on the Spark service
    def _spark(self) -> None:
        service = self.cluster.layout.spark_service
        if self.spark_killed_at is None:
            try:
                jobs = httpx.get(f"{service}/health", timeout=5).json().get("jobs", {})
            except httpx.HTTPError:
                return
            if jobs.get("running"):
                self.cluster.kill("worker 1")
                self.spark_killed_at = time.monotonic()
                self.log(f"SIGKILL Spark worker 1 (and its executor) while the Spark service ran {jobs['running']} "
                         "bulk import job(s)")
            return
        if self.spark_done:
            return
        service_log = next(p for p in self.cluster.spark.pieces if p.name == "spark service").log
        text = service_log.read_text(errors="replace")
        if not self.worker_lost_seen and ("Lost executor" in text or "Executor lost" in text or "remove executor"
                                          in text.lower()):
            self.worker_lost_seen = True
            self.log("the Spark driver (service) saw the executor lost and resubmits its tasks to the other one")
        jobs = httpx.get(f"{service}/health", timeout=5).json().get("jobs", {})
        if not jobs.get("running"):
            self.log(f"the Spark service's job(s) ended: {jobs} (its jobs so far by state)")
            self.spark_done = True

    # the scheduler, once the first date is imported
    def _scheduler(self, imported: int) -> None:
        if self.scheduler_restarted_at is None:
            if imported >= 1:
                self.scheduler_restarted_at = datetime.now().astimezone()
                self.cluster.restart("airflow scheduler")
                self.log("restarted the scheduler (SIGTERM, then started again) after the first date was imported")
            return
        if self.scheduler_done:
            return
        health = self.client.get("/api/v2/monitor/health").json().get("scheduler", {})
        beat = health.get("latest_scheduler_heartbeat")
        if health.get("status") == "healthy" and beat and datetime.fromisoformat(beat) > self.scheduler_restarted_at:
            text = self.cluster.piece("airflow scheduler").log.read_text(errors="replace")
            adopted = [line.strip()[:160] for line in text.rsplit("restarted ---", 1)[-1].splitlines()
                       if "dopt" in line]
            self.log("the new scheduler heartbeats (healthy)" + (f"; its log: {adopted[0]}" if adopted else ""))
            self.scheduler_done = True


def _runs(client: httpx.Client, op: str, **params: Any) -> list[dict[str, Any]]:
    r = client.get(f"/api/v2/dags/sleeper_{TABLE}_{op}/dagRuns", params={"limit": 1000, **params})
    assert r.status_code == 200, r.text
    return list(r.json()["dag_runs"])


def test_records_and_dates_land_exactly_once_through_a_worker_an_executor_and_the_scheduler_killed(cluster):
    log = Timeline()
    try:
        _scenario(cluster, log)
    finally:
        print("\ntimeline (seconds since the table was created):\n" + log.text())


def _scenario(cluster: Any, log: Timeline) -> None:
    from sleeper_ops import Sleeper
    from sleeper_ops.maintenance.gc import data_prefix, scratch_root

    layout = cluster.layout
    sleeper = Sleeper(cluster.client_home)
    sleeper.create_table(TABLE, SCHEMA, properties=PROPERTIES)
    _put_inputs(layout)
    table = sleeper.table(TABLE)
    log("table created, 4 dates of input in S3")
    client = airflow_client(layout.api_url, cluster.admin_password)
    for op in DAG_OPS:
        poll(lambda: client.get(f"/api/v2/dags/sleeper_{TABLE}_{op}").status_code == 200, f"the {op} DAG", 120)
    log("the DAG processor parsed the table's 5 DAGs")

    stop = threading.Event()
    writers = [Writer(n, layout.api_url, cluster.admin_password, stop) for n in range(WRITERS)]
    for w in writers:
        w.start()
    dag = f"sleeper_{TABLE}_bulk_import"
    r = client.post("/api/v2/backfills", json={"dag_id": dag, "from_date": f"{DATES[0]}T00:00:00Z",
                                               "to_date": f"{DATES[-1]}T00:00:00Z", "max_active_runs": 1})
    assert r.status_code in (200, 201), r.text
    backfill = r.json()["id"]
    log(f"backfill {backfill} of {DATES[0]}..{DATES[-1]} created; 2 REST writers writing")

    chaos = Chaos(cluster, client, log,
                  lambda: sleeper.state_store.list_jobs(table.info.table_id, kind="compaction", limit=20))
    deadline = time.monotonic() + WORK_TIMEOUT
    seen_success: set[str] = set()
    try:
        while True:
            runs = _runs(client, "bulk_import", run_type="backfill")
            for run in runs:
                if run["state"] == "success" and run["dag_run_id"] not in seen_success:
                    seen_success.add(run["dag_run_id"])
                    log(f"bulk import of {run['logical_date'][:10]} succeeded (try run {run['dag_run_id']})")
            chaos.step(len(seen_success))
            finished = client.get(f"/api/v2/backfills/{backfill}").json().get("completed_at") is not None
            if finished and chaos.done:
                break
            assert all(w.error is None for w in writers), [w.error for w in writers]
            assert time.monotonic() < deadline, f"not done in {WORK_TIMEOUT:g} s:\n{log.text()}\nruns {runs}"
            time.sleep(0.5)
    finally:
        stop.set()
        for w in writers:
            w.join(90)
    assert all(w.error is None for w in writers), [w.error for w in writers]
    acked = [k for w in writers for k in w.acked]
    log(f"writers stopped: {len(acked)} records acknowledged, {sum(w.resent for w in writers)} requests resent")

    poll(lambda: table.buffer_stats().rows == 0, "the flush DAG to empty the buffer", 180)
    log("the flush DAG (on its asset) emptied the buffer")

    def active() -> list[str]:
        return [f"{op} {r['dag_run_id']} {r['state']}" for op in DAG_OPS for r in _runs(client, op)
                if r["state"] not in ("success", "failed")]
    poll(lambda: not active(), "a moment with every DAG run ended (no task stuck)", 120)
    for op in DAG_OPS:  # no new run from here on (a run created meanwhile stays queued)
        assert client.patch(f"/api/v2/dags/sleeper_{TABLE}_{op}", json={"is_paused": True}).status_code == 200
    runs = {op: _runs(client, op) for op in DAG_OPS}
    log("every DAG run ended; DAGs paused: " + "; ".join(
        f"{op} {dict(Counter(r['state'] for r in rs))}" for op, rs in runs.items()))
    # the runs failed are those of the killed worker's tasks alone (it ran up to two at once)
    killed_home = Path(layout.homes[chaos.celery_killed[0].removeprefix("airflow ")])
    failed = [(op, r["dag_run_id"]) for op, rs in runs.items() for r in rs if r["state"] == "failed"]
    assert ("compaction", chaos.celery_killed[1]) in failed, failed
    for op, run_id in failed:
        assert list(killed_home.rglob(f"dag_id=sleeper_{TABLE}_{op}/run_id={run_id}/**/*.log")), (op, run_id)
    log(f"the failed runs are the tasks the killed worker ran: {', '.join(f'{op} {r}' for op, r in failed)}")
    untracked = table.gc(dry_run=True, orphans=True, now_ms=int(time.time() * 1000) + 12 * 60_000).orphans_deleted
    report = table.gc(now_ms=int(time.time() * 1000) + 12 * 60_000)
    log(f"GC as of when its delays have passed: {report.summary()} ({len(untracked)} untracked objects were "
        "outputs of killed attempts)")

    # every acknowledged record once, every date's records once
    keys = Counter(table.query(ranges=[("", None)]).column("key").to_pylist())
    doubled = {k: n for k, n in keys.items() if n > 1}
    assert doubled == {}, f"records stored twice: {list(doubled)[:10]}"
    missing = [k for k in acked if k not in keys]
    assert missing == [], f"{len(missing)} acknowledged records lost, e.g. {missing[:10]}"
    for day in DATES:
        assert sum(1 for k in keys if k.startswith(f"d{day}-")) == ROWS_PER_DATE, day
    assert len(keys) == len(acked) + len(DATES) * ROWS_PER_DATE
    # every date imported by one committed job, and its run succeeded
    backfilled = _runs(client, "bulk_import", run_type="backfill")
    assert sorted(r["logical_date"][:10] for r in backfilled if r["state"] == "success") == list(DATES), backfilled
    committed = [j for j in table.jobs("bulk_import") if j.status == "committed"]
    assert len(committed) == len(DATES), committed
    # no orphan: the bucket holds exactly the files the table references
    state = sleeper.state_store.load_state(table.info.table_id)
    referenced = {f for f, refs in state.refs_by_file.items() if refs}
    objects = {o.key.removesuffix(".sketches") + (".parquet" if o.key.endswith(".sketches") else "")
               for o in sleeper.objects.list(data_prefix(table.info.table_id))}
    assert objects == referenced, (sorted(objects - referenced), sorted(referenced - objects))
    assert list(sleeper.objects.list(scratch_root(table.info.table_id))) == []
    assert chaos.celery_killed and chaos.spark_killed_at and chaos.scheduler_restarted_at
    log(f"checked: {len(acked)} acknowledged + {len(DATES) * ROWS_PER_DATE} imported records, each once; "
        f"{len(DATES)} dates, one committed import each; bucket = the {len(referenced)} referenced files")
    sleeper.close()
    client.close()
