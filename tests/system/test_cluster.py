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
it and that task's compaction job is started in the state store (not while the worker
also runs a dated import task: that one would retry only after the DAG's 2-minute
retry delay), a Spark worker (with its executor) while a bulk import job runs on the
Spark service, and the scheduler is restarted once the first date is imported. The
scheduler fails the killed task after ``HEARTBEAT_TIMEOUT`` seconds without a
heartbeat; its run's teardown releases the compaction lease; the worker is restarted.

At the end every DAG is paused and every run must be in a terminal state; GC runs as of
when the delays have passed (an output the killed job wrote is untracked: an orphan
once the grace and the job's abandon time have passed), and then: every acknowledged
record and every imported record is in the table exactly once, every date was imported
by one committed job, and the bucket holds exactly the files the table references
(history retention 0). The timeline of each kill and of what recovered it is printed.

Before that, on the same cluster, the shape as a user meets it: the Celery workers work
in folders of their own, and no process of the cluster takes the Sleeper home or state
store that the shell that started it names (a decoy, unreachable); a table created and
written with the CLI against the cluster's stores, flushed by its DAG run through
Airflow's REST API on a Celery worker (which has no Sleeper files and no
``SLEEPER_HOME``: everything from the ``sleeper_default`` and ``aws_default``
connections), reads back exactly. (``sleeper cluster``'s Ctrl-C is
tests/integration/test_cluster_cli.py's; that stopping the cluster leaves no process,
this module's fixture's.)

Then, on the same cluster, a table on EMR Serverless: its dated import defers to the
cluster's triggerer (the provider's trigger, polling moto's EMR through ``aws_default``)
and resumes on a worker; the task's log is read back over REST from the bucket.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.airflow_runs import request_parse, run_report, task_log
from tests.cluster_helpers import airflow_client, cluster_work_dir, one_cluster_at_a_time, poll, processes_using
from tests.system.cluster_faults import Chaos, Timeline, Writer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TABLE = "kills"
DATES = ("2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04")
ROWS_PER_DATE = 1000
WRITERS = 2
BATCH = 25
#: seconds without a heartbeat before the scheduler fails a task whose worker died
HEARTBEAT_TIMEOUT = 15
#: the work's time (about 80 s on a quiet machine); room for one retry of a dated import: a task
#: the scheduler's restart or a kill caught in flight retries after the DAG's 2-minute retry delay
WORK_TIMEOUT = 420.0
DAG_OPS = ("bulk_import", "flush", "compaction", "split", "gc")
PROPERTIES = {
    "sleeper.table.bulk.import.source": "s3://sleeper-data/raw/{{ data_interval_start | ds }}/",
    "sleeper.table.bulk.import.min.leaf.partitions": "2",
    "sleeper.table.bulk.import.min.rows.per.leaf": "1",
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
DECOY_DSN = "postgresql://nobody@127.0.0.1:9/none"
SHAPE_TABLE = "shape"
SHAPE_RECORDS = [{"key": f"k{i:04d}", "n": i} for i in range(500)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The whole shape, started in this process; at the end, stopped with nothing left."""
    with one_cluster_at_a_time(tmp_path_factory):
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed (make redis)")
        from sleeper_ops.cluster.run import running_cluster
        from sleeper_ops.spark.cluster import free_port

        work = cluster_work_dir(tmp_path_factory, "cluster-kills")
        started = time.monotonic()
        with contextlib.ExitStack() as stack:
            with _shell_naming_a_decoy_sleeper(work / "decoy"):
                c = stack.enter_context(running_cluster(work / "w", state_store="dynamodb", api_port=free_port(),
                                                        spark=True, timeout=240.0,
                                                        task_heartbeat_timeout=HEARTBEAT_TIMEOUT))
            print(f"cluster ready in {time.monotonic() - started:.1f} s")
            yield c
        left = processes_using(str(work / "w"))
        assert left == [], f"processes left behind by the cluster: {left}"
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _shell_naming_a_decoy_sleeper(decoy: Path) -> Iterator[None]:
    """The environment of a user's shell that names a Sleeper of its own (unreachable), for
    the cluster's start: no cluster process may take it (a DAG parse or a task that did
    would fail on its state store). Restored after: this process, the tests' client, uses
    the cluster's client home alone."""
    decoy.mkdir()
    (decoy / "sleeper.toml").write_text(f'[state_store]\ndsn = "{DECOY_DSN}"\n')
    shell = {name: os.environ.get(name) for name in ("SLEEPER_HOME", "SLEEPER_STATE_STORE_DSN")}
    os.environ.update(SLEEPER_HOME=str(decoy), SLEEPER_STATE_STORE_DSN=DECOY_DSN)
    try:
        yield
    finally:
        for name, value in shell.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _aws_client(layout: Any, service: str) -> Any:
    """A boto3 client of ``service`` on the cluster's moto server."""
    import boto3

    return boto3.client(service, endpoint_url=layout.aws_endpoint, region_name=layout.aws_region,
                        aws_access_key_id=layout.aws_access_key, aws_secret_access_key=layout.aws_secret_key)


def _put_inputs(layout: Any) -> None:
    s3 = _aws_client(layout, "s3")
    for day in DATES:
        rows = pa.table({"key": [f"d{day}-{i:05d}" for i in range(ROWS_PER_DATE)],
                         "n": pa.array(range(ROWS_PER_DATE), pa.int64())})
        buf = io.BytesIO()
        pq.write_table(rows, buf)
        s3.put_object(Bucket=layout.bucket, Key=f"raw/{day}/part-0.parquet", Body=buf.getvalue())


def _runs(client: httpx.Client, op: str, **params: Any) -> list[dict[str, Any]]:
    r = client.get(f"/api/v2/dags/sleeper_{TABLE}_{op}/dagRuns", params={"limit": 1000, **params})
    assert r.status_code == 200, r.text
    return list(r.json()["dag_runs"])


def test_the_celery_workers_work_in_folders_of_their_own_and_no_process_takes_the_shells_sleeper(cluster):
    for worker in ("worker-1", "worker-2"):
        pid = cluster.piece(f"airflow {worker}").process.pid
        assert os.readlink(f"/proc/{pid}/cwd") == cluster.layout.homes[worker]
        assert Path(cluster.layout.homes[worker]).name == worker
    decoy = str(Path(cluster.work).parent / "decoy")
    pieces = cluster.pieces + (cluster.spark.pieces if cluster.spark is not None else [])
    environ = {p.name: Path(f"/proc/{p.process.pid}/environ").read_bytes().decode(errors="replace") for p in pieces}
    took = [name for name, env in environ.items() if decoy in env or DECOY_DSN in env]
    assert len(pieces) >= 10 and took == [], f"cluster processes took the shell's SLEEPER_HOME or state store: {took}"


def _sleeper(home: Path, *args: str) -> str:
    """``sleeper ARGS`` as a user runs it on the cluster's client home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLEEPER_", "AIRFLOW"))}
    env.update(SLEEPER_HOME=str(home), AWS_EC2_METADATA_DISABLED="true")
    p = subprocess.run([str(Path(sys.executable).with_name("sleeper")), *args], env=env, cwd=home,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"sleeper {' '.join(args)}: exit {p.returncode}: {p.stderr}"
    return p.stdout


def test_a_dag_run_on_a_celery_worker_flushes_cli_writes_into_the_dynamodb_cluster(cluster):
    home = cluster.client_home
    (home / "schema.json").write_text(json.dumps(SCHEMA))
    (home / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in SHAPE_RECORDS))
    manual_only = [arg for op in ("flush", "split", "compaction", "gc", "ingest_batcher")
                   for arg in ("--property", f"sleeper.table.schedule.{op}=none")]
    _sleeper(home, "table", "create", SHAPE_TABLE, "--schema", str(home / "schema.json"), *manual_only)
    _sleeper(home, "write", SHAPE_TABLE, str(home / "records.jsonl"))
    assert _sleeper(home, "query", SHAPE_TABLE, "--range", '""', "null", "--no-buffer") == ""  # only buffered yet

    dag_id = f"sleeper_{SHAPE_TABLE}_flush"
    client = airflow_client(cluster.layout.api_url, cluster.admin_password)
    try:
        # the connection the workers use is one the UI lists and its Test button reaches
        r = client.get("/api/v2/connections/sleeper_default")
        assert r.status_code == 200 and r.json()["conn_type"] == "sleeper", r.text
        form = {k: v for k, v in r.json().items() if v is not None and k in (
            "connection_id", "conn_type", "host", "login", "password", "schema", "port", "extra")}
        r = client.post("/api/v2/connections/test", json=form)  # what the UI's Test button sends
        assert r.status_code == 200 and r.json()["status"] is True, r.text
        poll(lambda: client.get(f"/api/v2/dags/{dag_id}").status_code == 200, f"the {dag_id} DAG", 120)
        r = client.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None})
        assert r.status_code == 200, r.text
        run_id = r.json()["dag_run_id"]
        state = poll(lambda: (s := client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()["state"]) in (
            "success", "failed") and s, f"run {run_id} to end", 120)
        ti = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/flush").json()
    finally:
        client.close()
    assert state == "success", ti
    assert ti["executor"] in (None, "CeleryExecutor") and ti["queue"] == "default", ti
    worker_logs = [p for w in ("worker-1", "worker-2")
                   for p in Path(cluster.layout.homes[w]).rglob(f"dag_id={dag_id}/**/*.log")]
    assert len(worker_logs) == 1, f"the flush task's log is not in exactly one Celery worker's folder: {worker_logs}"

    lines = _sleeper(home, "query", SHAPE_TABLE, "--range", '""', "null", "--no-buffer").splitlines()
    assert sorted((json.loads(line)["key"], json.loads(line)["n"]) for line in lines) == \
        [(r["key"], r["n"]) for r in SHAPE_RECORDS]


def test_records_and_dates_land_exactly_once_through_a_worker_an_executor_and_the_scheduler_killed(cluster):
    log = Timeline()
    try:
        _scenario(cluster, log)
    finally:
        print("\ntimeline (seconds since the table was created):\n" + log.text())


def _retried(client: httpx.Client, dag: str, run_id: str) -> str:
    """What a run's tasks tried more than once, for the timeline ('' when none did)."""
    tis = client.get(f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances").json().get("task_instances", [])
    again = [f"{ti['task_id']} on try {ti['try_number']}" for ti in tis if (ti.get("try_number") or 0) > 1]
    return f"; retried: {', '.join(again)}" if again else ""


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
    for op in DAG_OPS:  # each file parsed now, not at the DAG processor's next round
        request_parse(client, op)
    for op in DAG_OPS:
        poll(lambda: client.get(f"/api/v2/dags/sleeper_{TABLE}_{op}").status_code == 200, f"the {op} DAG", 120)
    log("the DAG processor parsed the table's 5 DAGs")

    stop = threading.Event()
    writers = [Writer(n, layout.api_url, cluster.admin_password, TABLE, stop, BATCH) for n in range(WRITERS)]
    for w in writers:
        w.start()
    dag = f"sleeper_{TABLE}_bulk_import"
    r = client.post("/api/v2/backfills", json={"dag_id": dag, "from_date": f"{DATES[0]}T00:00:00Z",
                                               "to_date": f"{DATES[-1]}T00:00:00Z", "max_active_runs": 1})
    assert r.status_code in (200, 201), r.text
    backfill = r.json()["id"]
    log(f"backfill {backfill} of {DATES[0]}..{DATES[-1]} created; 2 REST writers writing")

    chaos = Chaos(cluster, client, log, TABLE,
                  lambda: sleeper.state_store.list_jobs(table.info.table_id, kind="compaction", limit=20),
                  HEARTBEAT_TIMEOUT)
    deadline = time.monotonic() + WORK_TIMEOUT
    seen_success: set[str] = set()
    try:
        while True:
            runs = _runs(client, "bulk_import", run_type="backfill")
            for run in runs:
                if run["state"] == "success" and run["dag_run_id"] not in seen_success:
                    seen_success.add(run["dag_run_id"])
                    log(f"bulk import of {run['logical_date'][:10]} succeeded (try run {run['dag_run_id']})"
                        + _retried(client, dag, run["dag_run_id"]))
            chaos.step(len(seen_success))
            # the backfill's runs (all made by its POST) ended: Airflow sets its completed_at only
            # in a scheduler pass every 30 s after that
            finished = len(runs) == len(DATES) and all(r["state"] in ("success", "failed") for r in runs)
            if finished and chaos.done:
                break
            assert all(w.error is None for w in writers), [w.error for w in writers]
            assert time.monotonic() < deadline, f"not done in {WORK_TIMEOUT:g} s:\n{log.text()}\n" + "\n".join(
                f"run {r['dag_run_id']} {r['state']}:\n{run_report(client, dag, r['dag_run_id'])}"
                for r in runs if r["state"] != "success")
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
    killed_run = chaos.celery_killed[1]
    if chaos.killed_state == "success":
        # the task reported its end in the instant before the kill (seen once in CI): then its work is done
        label = f"sleeper_{TABLE}_compaction/{killed_run}"
        jobs = [j for j in table.jobs("compaction") if j.run_id == label]
        assert jobs and all(j.status == "committed" for j in jobs), (label, jobs)
        log(f"the killed run_local had reported success just before the kill: its {len(jobs)} job(s) committed")
    else:
        assert ("compaction", killed_run) in failed, failed
    for op, run_id in failed:
        if list(killed_home.rglob(f"dag_id=sleeper_{TABLE}_{op}/run_id={run_id}/**/*.log")):
            continue
        assert _failed_after_returning(client, f"sleeper_{TABLE}_{op}", run_id), \
            f"{op} run {run_id} failed without a log in the killed worker's folder:\n" + \
            run_report(client, f"sleeper_{TABLE}_{op}", run_id)
        log(f"{op} run {run_id} failed on a live worker after its operator had returned (Airflow failed the try "
            "while ending it); its work is checked below with every record:\n"
            + run_report(client, f"sleeper_{TABLE}_{op}", run_id, tail=600))
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
    assert chaos.executor_lost(), "the Spark worker was killed but the service's driver lost no executor: " \
                                  "the kill hit no running import"
    log(f"checked: {len(acked)} acknowledged + {len(DATES) * ROWS_PER_DATE} imported records, each once; "
        f"{len(DATES)} dates, one committed import each; bucket = the {len(referenced)} referenced files")
    sleeper.close()
    client.close()


def _failed_after_returning(client: Any, dag_id: str, run_id: str) -> bool:
    """Whether every failed task of the run had returned from its operator's ``execute``
    (its log holds Airflow's "Post Execute" group, which follows only a return): Airflow
    then failed the try while ending it. Seen twice in CI on a live worker (a flush, a bulk
    import), the work committed and the return value pushed as XCom, with no error in the
    log; the cause is open (issue 36's note). Such a run's records are checked with all
    the others; any other failure on a live worker fails the test."""
    tis = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances").json().get("task_instances", [])
    failed = [ti for ti in tis if ti.get("state") == "failed"]
    return bool(failed) and all("::group::Post Execute" in task_log(client, dag_id, run_id, ti["task_id"],
                                                                    ti["try_number"]) for ti in failed)


EMR_TABLE = "emr"
EMR_DATE = "2026-04-01"
EMR_ROLE = "arn:aws:iam::123456789012:role/sleeper-emr-bulk-import"  # moto's account


def test_an_emr_serverless_import_defers_to_the_clusters_triggerer_and_ends_on_a_worker(cluster):
    """The dated import of a table on EMR Serverless, in the cluster's own processes: a
    Celery worker starts the job on moto's EMR Serverless through ``aws_default`` and
    defers; the cluster's triggerer rebuilds the provider's trigger and polls the job
    through aiobotocore with the same connection; the task resumes on a worker and
    succeeds. moto ends every job SUCCESS at once and runs nothing, so nothing is
    imported here (what the job commits, and a failed job, are
    tests/integration/test_bulk_import_emr.py's)."""
    from sleeper_ops import Sleeper

    layout = cluster.layout
    emr = _aws_client(layout, "emr-serverless")
    app = emr.create_application(name="sleeper", releaseLabel="emr-7.9.0", type="SPARK")["applicationId"]
    emr.start_application(applicationId=app)
    buf = io.BytesIO()
    pq.write_table(pa.table({"key": ["a", "b"], "n": pa.array([1, 2], pa.int64())}), buf)
    _aws_client(layout, "s3").put_object(Bucket=layout.bucket, Key=f"raw-emr/{EMR_DATE}/part-0.parquet",
                                         Body=buf.getvalue())
    package = f"s3://{layout.bucket}/emr-package"
    none = {f"sleeper.table.schedule.{op}": "none" for op in ("flush", "compaction", "split", "gc", "ingest_batcher")}
    with Sleeper(cluster.client_home) as sleeper:
        table = sleeper.create_table(EMR_TABLE, SCHEMA, properties={
            **none,
            "sleeper.table.bulk.import.source": f"s3://{layout.bucket}/raw-emr/{{{{ data_interval_start | ds }}}}/",
            "sleeper.table.bulk.import.platform": "emr_serverless",
            "sleeper.table.bulk.import.emr.serverless.application.id": app,
            "sleeper.table.bulk.import.emr.serverless.execution.role.arn": EMR_ROLE,
            "sleeper.table.bulk.import.emr.serverless.package": package})
        table_id = table.info.table_id
    dag = f"sleeper_{EMR_TABLE}_bulk_import"
    client = airflow_client(layout.api_url, cluster.admin_password)
    try:
        request_parse(client, "bulk_import")
        poll(lambda: client.get(f"/api/v2/dags/{dag}").status_code == 200, f"the {dag} DAG", 120)
        r = client.post("/api/v2/backfills", json={"dag_id": dag, "from_date": f"{EMR_DATE}T00:00:00Z",
                                                   "to_date": f"{EMR_DATE}T00:00:00Z"})
        assert r.status_code in (200, 201), r.text
        (run,) = poll(lambda: [x for x in client.get(f"/api/v2/dags/{dag}/dagRuns").json()["dag_runs"]
                               if x["state"] in ("success", "failed")], "the EMR import's run to end", 180)
        ti = client.get(f"/api/v2/dags/{dag}/dagRuns/{run['dag_run_id']}/taskInstances/bulk_import").json()
        assert (run["state"], ti["state"], ti["try_number"]) == ("success", "success", 1), ti
        assert ti["executor"] in (None, "CeleryExecutor") and ti["hostname"], ti
        # the worker uploads each part of the log once its task process ends, just after the
        # task's state is set: wait for both parts (the deferral's and the resumed one's)
        def resumed_log() -> str | None:
            text = task_log(client, dag, run["dag_run_id"], "bulk_import", 1)
            return text if "Serverless job completed" in text and "Pausing task as DEFERRED." in text else None
        logs = poll(resumed_log, "the resumed task's log in the bucket", 60)
    finally:
        client.close()

    # one job, asked of EMR with the date's source and import key
    (job,) = emr.list_job_runs(applicationId=app)["jobRuns"]
    args = emr.get_job_run(applicationId=app, jobRunId=job["id"])["jobRun"]["jobDriver"]["sparkSubmit"][
        "entryPointArguments"]
    assert args[args.index("--sources") + 1] == f"s3://{layout.bucket}/raw-emr/{EMR_DATE}/"
    assert args[args.index("--import-key") + 1] == f"{table_id}/{EMR_DATE}T00:00:00+00:00"
    # the task's log, read over REST from the bucket (remote logging; the worker's and the
    # triggerer's parts): deferred on a worker, the job polled in the triggerer until its
    # success event, then resumed on a worker
    lines = [json.loads(line) for line in logs.splitlines() if line.strip()]
    events = [str(x.get("event")) for x in lines]
    assert any(e.startswith(f"s3://{layout.bucket}/airflow-logs/dag_id={dag}/") and e.endswith("attempt=1.log")
               for e in events), events[:5]
    deferred = events.index("Pausing task as DEFERRED. ")
    started = next(i for i, e in enumerate(events) if e.startswith("trigger ") and e.endswith(" starting"))
    fired = events.index("Trigger fired event")
    assert "'status': 'success'" in lines[fired]["result"] and job["id"] in lines[fired]["result"], lines[fired]
    assert deferred < started < fired < events.index("Serverless job completed"), events


EVENTS_TABLE = "events"
#: the issue's 1,000 files take minutes on the cluster's one moto server (every S3, SQS and
#: DynamoDB call of the drop, the watcher, landing and the batcher goes through its one
#: thread), so the suite drops 100 (the test takes about 50 s, against 86-106 s for 200: it runs
#: on the suite's longest worker); SLEEPER_EVENT_FILES=1000 for the issue's figure
EVENT_FILES = int(os.environ.get("SLEEPER_EVENT_FILES", "100"))
RECORDS_PER_FILE = 10
#: files a second the user drops, so the kill and its recovery fall within the drop
DROP_RATE = 5.0
#: the kill waits for this many uploads (runs are going by then)
KILL_AFTER_FILES = EVENT_FILES // 4
#: the table's visibility timeout: the killed run's messages come back this long after their receipt
EVENTS_VISIBILITY_SECONDS = 30
#: the work's time: the drop, then about a second a file on a loaded machine
EVENTS_TIMEOUT = 120 + EVENT_FILES / DROP_RATE + EVENT_FILES
#: the goal, from the last upload to the last record queryable
LATENCY_GOAL_SECONDS = 10.0


def test_files_dropped_into_the_bucket_under_a_worker_kill_are_each_queryable_once(cluster):
    """Issue 37, item 1: :data:`EVENT_FILES` Parquet files dropped under ``incoming/`` (the cluster's
    bucket notification sends each upload's message to its events queue), the table's
    ingest DAG run by its watcher on each batch of messages, the Celery worker running a
    ``land_events`` task killed while the drop goes on and restarted once the scheduler has
    failed that try (the task's retry lands the run's same messages, what the lost try
    landed being repeats). Then every record is queryable
    exactly once, each file was queued once (its message id the request id) however often
    its message was delivered, and the figures the issue asks are printed."""
    from sleeper_ops import Sleeper
    from sleeper_ops.orchestration.event_ingest import LAND_RETRIES
    from tests.system.cluster_events import Dropper, LandingKill, deliveries, event_keys, retried_tries, watcher_trigger

    layout = cluster.layout
    queue = cluster.events_queue
    none = {f"sleeper.table.schedule.{op}": "none" for op in ("flush", "compaction", "split", "gc", "ingest_batcher")}
    sleeper = Sleeper(cluster.client_home)
    table = sleeper.create_table(EVENTS_TABLE, SCHEMA, properties={
        **none, "sleeper.table.ingest.events.queue": queue,
        "sleeper.table.ingest.events.visibility.seconds": str(EVENTS_VISIBILITY_SECONDS)})
    dag = f"sleeper_{EVENTS_TABLE}_ingest_batcher"
    client = airflow_client(layout.api_url, cluster.admin_password)
    triggerer_log = cluster.piece("airflow triggerer").log
    log = Timeline()
    try:
        request_parse(client, "ingest_batcher")
        poll(lambda: client.get(f"/api/v2/dags/{dag}").status_code == 200, f"the {dag} DAG", 120)
        trigger_id = poll(lambda: watcher_trigger(client, f"sleeper://{EVENTS_TABLE}/events"),
                          "the watcher's trigger", 60)
        started_line = f"trigger ID {trigger_id} starting"  # a watcher's trigger is named by its id alone
        poll(lambda: started_line in triggerer_log.read_text(errors="replace"), "the triggerer to start the watcher",
             60)
        starts_before = triggerer_log.read_text(errors="replace").count(started_line)
        log("the table's ingest DAG is parsed and its watcher runs in the triggerer")

        dropper = Dropper(_aws_client(layout, "s3"), layout.bucket, EVENT_FILES, RECORDS_PER_FILE, DROP_RATE)
        kill = LandingKill(cluster, client, dag, log, KILL_AFTER_FILES)
        dropper.start()
        expected = EVENT_FILES * RECORDS_PER_FILE
        deadline = time.monotonic() + EVENTS_TIMEOUT
        committed, done_at = 0, 0.0
        while committed < expected or not kill.done:
            kill.step(dropper.uploaded)
            assert dropper.error is None, dropper.error
            if dropper.last_at is not None and committed < expected:
                committed = sum(r.record_count for r in table.state().references.values())
                done_at = time.monotonic()
            assert time.monotonic() < deadline, (
                f"{committed} of {expected} records after {EVENTS_TIMEOUT:g} s ({dropper.uploaded} files uploaded):\n"
                f"{log.text()}\n"
                + "\n".join(f"run {r['dag_run_id']} {r['state']}:\n{run_report(client, dag, r['dag_run_id'])}"
                            for r in client.get(f"/api/v2/dags/{dag}/dagRuns", params={"limit": 1000}).json()[
                                "dag_runs"] if r["state"] != "success"))
            time.sleep(0.2)
        assert dropper.last_at is not None and kill.killed is not None
        latency = done_at - dropper.last_at
        log(f"last of {EVENT_FILES} uploads at {dropper.last_at - log.start:.1f} s; every record committed "
            f"{latency:.1f} s later")
        assert client.patch(f"/api/v2/dags/{dag}", json={"is_paused": True}).status_code == 200
        runs = client.get(f"/api/v2/dags/{dag}/dagRuns", params={"limit": 1000}).json()["dag_runs"]
        retried = client.get(f"/api/v2/dags/{dag}/dagRuns/{kill.killed[1]}/taskInstances/land_events").json()
        log(f"the killed run's land_events: {retried['state']} on try {retried['try_number']}")
        failed_retries = retried_tries(client, dag, kill.killed[1], "land_events", kill.killed[2])
        for line in failed_retries:
            log(f"the killed run's land_events {line}")
        if failed_retries:  # who failed the retry (a scheduler's missed-heartbeat verdict shows here)
            log("the killed run:\n" + run_report(client, dag, kill.killed[1], tail=600))
        tasks = client.get(f"/api/v2/dags/{dag}/dagRuns/~/taskInstances", params={"limit": 1000}).json()[
            "task_instances"]
        events, delivered, distinct = deliveries(client, f"sleeper://{EVENTS_TABLE}/events")
        starts = triggerer_log.read_text(errors="replace").count(started_line) - starts_before
    finally:
        print("\ntimeline (seconds since the watcher ran):\n" + log.text())
        client.close()

    keys = Counter(table.query(ranges=[("", None)]).column("key").to_pylist())
    doubled = {k: n for k, n in keys.items() if n > 1}
    assert doubled == {}, f"records stored twice: {list(doubled)[:10]}"
    wanted = {k for n in range(EVENT_FILES) for k in event_keys(n, RECORDS_PER_FILE)}
    assert set(keys) == wanted, (len(set(keys) - wanted), len(wanted - set(keys)))
    requests = sleeper.state_store.list_ingest_requests(table.info.table_id, limit=None)
    assert Counter(r.status for r in requests) == {"ingested": EVENT_FILES}
    assert len({r.filename for r in requests}) == EVENT_FILES  # each file queued once, whatever was redelivered
    assert distinct >= EVENT_FILES  # each file's message (and moto's test event) reached the watcher
    assert starts > 1, "the triggerer never started the watcher's SqsSensorTrigger again after an event"
    # the lost try's messages were landed by a retry, on the run's same messages: the first
    # retry, unless a retry failed too (a transient error, each said above in the timeline)
    assert retried["state"] == "success", retried
    assert retried["try_number"] == kill.killed[2] + 1 + len(failed_retries), (retried, failed_retries)
    assert retried["try_number"] <= kill.killed[2] + LAND_RETRIES, retried
    dead = _aws_client(layout, "sqs").get_queue_attributes(QueueUrl=f"{queue}-dead", AttributeNames=[
        "ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"]
    assert dead == "0", f"{dead} messages went to the dead-letter queue (received too often while waiting)"
    states = Counter(r["state"] for r in runs)
    print(f"\nevent-driven ingest: {EVENT_FILES} files, {sum(keys.values())} records, each once (duplicates: 0); "
          f"{delivered - distinct} redeliveries seen ({delivered} messages delivered in {events} asset events, "
          f"{distinct} distinct); {len(runs)} DAG runs {dict(states)}; the watcher's trigger started {starts} times; "
          f"latency from the last upload to the last record queryable: {latency:.1f} s "
          f"(goal {LATENCY_GOAL_SECONDS:g} s); drop of {EVENT_FILES} files took "
          f"{dropper.last_at - (dropper.first_at or 0):.1f} s; load average {os.getloadavg()[0]:.1f}")
    print("tasks (run created, task, state, seconds): " + "; ".join(
        f"{t['dag_run_id'][17:36]} {t['task_id']} {t['state']} {t['duration'] or 0:.1f}"
        for t in sorted(tasks, key=lambda t: (t["dag_run_id"], t["task_id"] != "land_events"))))
    sleeper.close()
