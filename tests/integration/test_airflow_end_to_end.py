"""Live: Airflow standalone (``sleeper airflow``) with the DAGs and the REST plugin.

A user's path through the system, over HTTP only once the table exists: obtain a
token, queue an ingest request and write records over Sleeper's REST API, trigger
the table's ingest batcher DAG and then its compaction DAG over Airflow's REST API,
poll until both runs succeed, and read the records back over REST. The same calls
without a token get 401.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tomli_w

from tests.airflow_runs import request_parse, run_report, task_log
from tests.integration.spark_service_double import in_process_executor, job_times, serve
from tests.integration.test_readiness import lineage_env, lineage_events

httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.integration

SLEEPER = str(Path(sys.executable).parent / "sleeper")
SCHEMA = '{"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}'
READY = re.compile(r"Airflow is ready: (\S+)\s+user (\S+)\s+password (\S+)")
#: seconds between two reads of what a test waits for over the REST API (each read is a
#: request the API server answers on the cores the run shares)
POLL_SECONDS = 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sleeper(home: Path, *args: str) -> str:
    env = {**os.environ, "SLEEPER_HOME": str(home)}
    env.pop("SLEEPER_STATE_STORE_DSN", None)
    r = subprocess.run([SLEEPER, *args], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def airflow() -> Iterator[dict[str, Any]]:
    # Not under pytest's basetemp: concurrent pytest sessions rotate it, and the
    # embedded PostgreSQL's user must be able to reach its data directory.
    root = Path(tempfile.mkdtemp(prefix="sleeper-airflow-e2e-"))
    gates: dict[str, threading.Event] = {}
    try:
        # Spark jobs go through the Spark service's API, so a deferrable task can defer on it
        # and a test can hold a table's job at a gate. The service runs each bulk import as
        # the real job (job record, outputs named first, one commit by import key) with an
        # in-process runner, not a JVM a job: this module is about Airflow's API and
        # scheduling; Spark itself runs in test_dags, test_bulk_import and test_spark_service.
        with serve(in_process_executor(gates)) as (url, service):
            for af in _airflow(root / "home", spark_service=url):
                yield {**af, "spark_service": service, "spark_gates": gates}
    finally:
        for gate in gates.values():
            gate.set()
        shutil.rmtree(root, ignore_errors=True)


def _airflow(home: Path, spark_service: str) -> Iterator[dict[str, Any]]:
    home.mkdir()
    (home / "schema.json").write_text(SCHEMA)
    none = [f"--property=sleeper.table.schedule.{op}=none"
            for op in ("split", "compaction", "gc", "ingest_batcher", "flush")]
    _sleeper(home, "table", "create", "events", "--schema", str(home / "schema.json"),
             "--property", "sleeper.table.ingest.batcher.job.min.size=1",
             "--property", "sleeper.table.write.buffer.flush.age.seconds=3600",
             "--property", "sleeper.table.compaction.strategy=basic", *none)
    raw = tomllib.loads((home / "sleeper.toml").read_text())
    raw["spark"] = {**raw.get("spark", {}), "service": spark_service}
    (home / "sleeper.toml").write_text(tomli_w.dumps(raw))
    port = _free_port()
    env = {**os.environ, "SLEEPER_HOME": str(home), **lineage_env(home / "lineage")}
    env.pop("SLEEPER_STATE_STORE_DSN", None)
    log = open(home / "sleeper-airflow.out", "w+")
    proc = subprocess.Popen([SLEEPER, "airflow", "--port", str(port), "--no-demo",
                             "--users", "admin:admin,viewer:viewer"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        match = None
        while match is None:
            assert proc.poll() is None, f"sleeper airflow exited: {(home / 'sleeper-airflow.out').read_text()}"
            assert time.monotonic() < deadline, "Airflow did not become ready in 300 s"
            time.sleep(1)
            match = READY.search((home / "sleeper-airflow.out").read_text())
        url, user, password = match.groups()
        token = httpx.post(f"{url}/auth/token", json={"username": user, "password": password}, timeout=30)
        assert token.status_code in (200, 201), token.text
        yield {"url": url, "home": home, "token": token.json()["access_token"],
               "out": (home / "sleeper-airflow.out").read_text()}
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _client(af: dict[str, Any], token: bool = True) -> Any:
    headers = {"Authorization": f"Bearer {af['token']}"} if token else {}
    return httpx.Client(base_url=af["url"], headers=headers, timeout=60)


def _run_dag(c: Any, dag_id: str, conf: dict[str, Any] | None = None, timeout: float = 240) -> dict[str, Any]:
    r = c.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})
    assert r.status_code in (200, 201), r.text
    run_id = r.json()["dag_run_id"]
    deadline = time.monotonic() + timeout
    while True:
        run = c.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()
        if run["state"] in ("success", "failed"):
            break
        assert time.monotonic() < deadline, f"{dag_id} run {run_id} still {run['state']}"
        time.sleep(POLL_SECONDS)
    if run["state"] != "success":  # with the end of each failed task's log, so a failure explains itself
        pytest.fail(f"{dag_id} run {run_id} failed:\n" + run_report(c, dag_id, run_id))
    return run


def test_ingest_request_batcher_compaction_and_read_back_over_rest(airflow: dict[str, Any]) -> None:
    home: Path = airflow["home"]
    src = home / "ingest" / "input.parquet"  # under SLEEPER_HOME/ingest: an allowed ingest prefix by default
    src.parent.mkdir(exist_ok=True)
    pq.write_table(pa.table({"key": pa.array(range(0, 3000, 3), pa.int64()),
                             "v": [f"file-{i}" for i in range(1000)]}), src)
    with _client(airflow) as c:
        r = c.post("/sleeper/api/v1/tables/events/ingest-requests", json={"files": [str(src)]})
        assert r.status_code == 202, r.text
        for first in (1, 2):
            r = c.post("/sleeper/api/v1/tables/events/records",
                       json={"records": [{"key": k, "v": f"rest-{k}"} for k in range(first, 3000, 3)]})
            assert r.status_code == 201, r.text

        # the written records are read back from the buffer before any flush
        r = c.get("/sleeper/api/v1/tables/events/records", params={"key": "2999"})
        assert r.json()["records"] == [{"key": 2999, "v": "rest-2999"}]

        _run_dag(c, "sleeper_events_ingest_batcher")
        _run_dag(c, "sleeper_events_flush")
        files = c.get("/sleeper/api/v1/tables/events/files").json()["files"]
        assert len(files) == 2, files  # the batcher's and the flush's

        _run_dag(c, "sleeper_events_compaction")
        files = c.get("/sleeper/api/v1/tables/events/files").json()["files"]
        live = [f for f in files if f["references"]]
        assert len(live) == 1, files
        jobs = c.get("/sleeper/api/v1/tables/events/jobs").json()
        kinds = {(j["kind"], j["status"]) for j in (jobs["jobs"] if isinstance(jobs, dict) else jobs)}
        assert {("compaction", "committed"), ("ingest", "committed"), ("flush", "committed")} <= kinds, kinds

        r = c.get("/sleeper/api/v1/tables/events/records", params={"min": "0", "max": "null", "limit": 10000})
        assert r.status_code == 200, r.text
        records = r.json()["records"]
        assert [x["key"] for x in records] == list(range(3000))
        assert records[3]["v"] == "file-1" and records[4]["v"] == "rest-4"
        r = c.get("/sleeper/api/v1/tables/events/records", params={"key": "2999"})
        assert r.json()["records"] == [{"key": 2999, "v": "rest-2999"}]


def test_the_same_calls_without_a_token_get_401(airflow: dict[str, Any]) -> None:
    with _client(airflow, token=False) as c:
        assert c.post("/sleeper/api/v1/tables/events/ingest-requests", json={"files": ["x"]}).status_code == 401
        assert c.post("/sleeper/api/v1/tables/events/records", json={"records": []}).status_code == 401
        assert c.get("/sleeper/api/v1/tables/events/records", params={"key": "1"}).status_code == 401
        assert c.get("/sleeper/api/v1/tables").status_code == 401
        assert c.post("/api/v2/dags/sleeper_events_compaction/dagRuns",
                      json={"logical_date": None}).status_code == 401


def test_the_programs_that_fork_dag_parses_and_tasks_import_sleepers_libraries_once(airflow: dict[str, Any]) -> None:
    """sleeper airflow's home carries the airflow_local_settings.py that warms the DAG
    processor and the scheduler (LocalExecutor), so their forks parse DAG files and run
    tasks without importing pyarrow, psycopg and the rest afresh
    (sleeper_ops.orchestration.warm_imports); the API server and the triggerer fork neither."""
    settings = airflow["home"] / "airflow" / "config" / "airflow_local_settings.py"
    assert "warm()" in settings.read_text()
    log = (airflow["home"] / "airflow" / "standalone.log").read_text()
    warmed = {line.split("|", 1)[0].strip() for line in log.splitlines() if "modules imported once for" in line}
    assert warmed == {"dag-processor", "scheduler"}, warmed


def test_every_user_named_by_users_gets_a_printed_password_and_a_viewer_may_read_not_write(
        airflow: dict[str, Any]) -> None:
    m = re.search(r"other users: viewer password (\S+) \(in ", airflow["out"])
    assert m, airflow["out"]
    token = httpx.post(f"{airflow['url']}/auth/token", json={"username": "viewer", "password": m.group(1)},
                       timeout=30)
    assert token.status_code in (200, 201), token.text
    with httpx.Client(base_url=airflow["url"], headers={"Authorization": f"Bearer {token.json()['access_token']}"},
                      timeout=60) as c:
        assert [t["name"] for t in c.get("/sleeper/api/v1/tables").json()] == ["events"]
        assert c.post("/sleeper/api/v1/tables/events/records", json={"records": []}).status_code == 403


def test_the_airflow_command_with_only_airflow_home_reaches_the_running_airflow(airflow: dict[str, Any]) -> None:
    """``sleeper airflow`` writes its settings into airflow.cfg: the ``airflow`` command
    needs nothing but AIRFLOW_HOME (no stray SQLite database, no migration asked for)."""
    airflow_home = airflow["home"] / "airflow"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SLEEPER_"))}
    env["AIRFLOW_HOME"] = str(airflow_home)
    cli = str(Path(sys.executable).with_name("airflow"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cli, *args], env=env, capture_output=True, text=True, timeout=300)

    # a dated DAG (the only kind that backfills), once the DAG processor has it
    (airflow["home"] / "dated.json").write_text(DAILY_SCHEMA)
    _sleeper(airflow["home"], "table", "create", "dated", "--schema", str(airflow["home"] / "dated.json"),
             "--property", "sleeper.table.bulk.import.source=/nowhere/{{ ds }}/",
             # its maintenance DAGs manual only: their runs on the default crons until the table
             # is deleted take CPU the other tests' Airflow needs
             *[f"--property=sleeper.table.schedule.{op}=none"
               for op in ("split", "compaction", "gc", "ingest_batcher", "flush")])
    # waited for over the REST API (an ``airflow`` command is 3-4 s of CPU: polling with it
    # starved the other tests), then seen once through the command
    with _client(airflow) as c:
        deadline = time.monotonic() + 240
        while c.get("/api/v2/dags/sleeper_dated_bulk_import").status_code != 200:
            assert time.monotonic() < deadline, "the dated DAG did not appear in 240 s"
            time.sleep(2)
    listed = run("dags", "list", "-o", "plain")
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    assert "sleeper_events_compaction" in listed.stdout and "sleeper_dated_bulk_import" in listed.stdout
    backfill = run("backfill", "create", "--dag-id", "sleeper_dated_bulk_import", "--from-date", "2026-01-01",
                   "--to-date", "2026-01-03", "--dry-run")
    out = backfill.stdout + backfill.stderr
    assert "migration" not in out.lower(), out[-3000:]
    assert backfill.returncode == 0, out[-3000:]
    assert "2026-01-02" in backfill.stdout, out[-3000:]
    assert not list(airflow_home.glob("*.db")), "no stray SQLite database"
    _sleeper(airflow["home"], "table", "delete", "dated", "--yes")


# ----- bulk import: backfilled by date through Airflow's own backfill -------------------------------
DAYS = ("2026-01-01", "2026-01-02")
DAILY_SCHEMA = ('{"rowKeyFields": [{"name": "key", "type": "LongType"}], '
                '"valueFields": [{"name": "day", "type": "StringType"}]}')


def _day_rows(day: str, n: int = 2000) -> pa.Table:
    base = int(day.replace("-", "")) * 10_000  # each day's keys are its own
    return pa.table({"key": pa.array(range(base, base + n), pa.int64()), "day": [day] * n})


def _wait(c: Any, path: str, done: Any, timeout: float = 300, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        r = c.get(path)
        if r.status_code == 200 and done(r.json()):
            return r.json()
        assert time.monotonic() < deadline, f"{what or path}: {r.status_code} {r.text[:500]}"
        time.sleep(POLL_SECONDS)


def _parsed(c: Any, dag_id: str, operation: str) -> None:
    """Wait until the DAG processor has made ``dag_id`` (the ``operation`` DAG of a table just
    created), its file's parse asked for now (:func:`request_parse`) rather than waited for."""
    request_parse(c, operation)
    _wait(c, f"/api/v2/dags/{dag_id}", lambda d: d.get("dag_id") == dag_id, what=f"the {dag_id} DAG to be parsed")


def _backfill(c: Any, dag_id: str, reprocess: str) -> list[dict[str, Any]]:
    r = c.post("/api/v2/backfills", json={"dag_id": dag_id, "from_date": f"{DAYS[0]}T00:00:00Z",
                                          "to_date": f"{DAYS[-1]}T00:00:00Z", "reprocess_behavior": reprocess,
                                          "max_active_runs": 1})
    assert r.status_code in (200, 201), r.text
    backfill_id = r.json()["id"]
    _wait(c, f"/api/v2/backfills/{backfill_id}", lambda b: b.get("completed_at") is not None, what="backfill")
    runs = c.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"run_type": "backfill", "limit": 100}).json()["dag_runs"]
    return [run for run in runs if run.get("backfill_id", backfill_id) == backfill_id]


def test_bulk_import_dates_backfilled_through_the_airflow_api_come_back_exactly_once(
        airflow: dict[str, Any]) -> None:
    """Issue 10: two dates backfilled with ``POST /api/v2/backfills``, then reprocessed
    with ``reprocess_behavior=completed``: every record of the three days comes back
    exactly once (the import key is the table id plus the date)."""
    home: Path = airflow["home"]
    raw = home / "ingest" / "raw"
    recent = [time.strftime("%Y-%m-%d", time.gmtime(time.time() - d * 86400)) for d in range(3)]
    for day in (*DAYS, *recent):  # the scheduler's own latest run finds its date too
        (raw / day).mkdir(parents=True, exist_ok=True)
        pq.write_table(_day_rows(day), raw / day / "events.parquet")
    (home / "daily.json").write_text(DAILY_SCHEMA)
    none = [f"--property=sleeper.table.schedule.{op}=none"
            for op in ("split", "compaction", "gc", "ingest_batcher", "flush")]
    _sleeper(home, "table", "create", "daily", "--schema", str(home / "daily.json"),
             "--property", f"sleeper.table.bulk.import.source={raw}/{{{{ data_interval_start | ds }}}}/",
             "--property", "sleeper.table.bulk.import.min.leaf.partitions=2",
             "--property", "sleeper.table.bulk.import.min.rows.per.leaf=1", *none)
    dag_id = "sleeper_daily_bulk_import"
    with _client(airflow) as c:
        _parsed(c, dag_id, "bulk_import")
        for reprocess in ("none", "completed"):
            runs = _backfill(c, dag_id, reprocess)
            assert sorted(r["state"] for r in runs) == ["success"] * len(runs) and runs, (reprocess, runs)
            for day in DAYS:
                base = int(day.replace("-", "")) * 10_000
                r = c.get("/sleeper/api/v1/tables/daily/records",
                          params={"min": str(base), "max": str(base + 10_000), "limit": 100_000})
                assert r.status_code == 200, r.text
                got = r.json()["records"]
                assert len(got) == 2000 and {x["day"] for x in got} == {day}, (reprocess, day, len(got))
                assert len({x["key"] for x in got}) == 2000  # each once
        jobs = c.get("/sleeper/api/v1/tables/daily/jobs", params={"kind": "bulk_import"}).json()
        jobs = jobs["jobs"] if isinstance(jobs, dict) else jobs
        assert len([j for j in jobs if j["status"] == "committed"]) >= len(DAYS)


def test_a_maintenance_dag_refuses_a_backfill_over_the_airflow_api(airflow: dict[str, Any]) -> None:
    """Maintenance runs now, on state as it is: Airflow itself refuses to backfill them
    (``allowed_run_types``), no run is created, and the answer says why in one line (the
    Sleeper plugin's middleware), for the backfill and for its dry run (the UI's dialog)."""
    from sleeper_ops.orchestration.dag_problems import backfill_refusal

    dag_id = "sleeper_events_compaction"
    dates = {"dag_id": dag_id, "from_date": f"{DAYS[0]}T00:00:00Z", "to_date": f"{DAYS[-1]}T00:00:00Z"}
    with _client(airflow) as c:
        for path in ("/api/v2/backfills", "/api/v2/backfills/dry_run"):
            r = c.post(path, json=dates)
            # 400: backfills not allowed; the dry run first finds no schedule (events' schedules are none): 422
            assert r.status_code in (400, 422), (path, r.status_code, r.text)
            assert r.json()["detail"] == backfill_refusal(dag_id, "events", "compaction"), (path, r.text)
        runs = c.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"run_type": "backfill"}).json()["dag_runs"]
        assert runs == []


def test_sleeper_default_is_a_connection_the_api_lists_and_its_test_reaches_the_state_store(
        airflow: dict[str, Any]) -> None:
    """``sleeper airflow`` writes ``sleeper_default`` (naming its home) into Airflow's
    database and enables the connection test: Airflow's documented Test
    (``POST /api/v2/connections/test``) answers true; a connection that cannot open
    Sleeper answers false in one line."""
    home: Path = airflow["home"]
    with _client(airflow) as c:
        r = c.get("/api/v2/connections/sleeper_default")
        assert r.status_code == 200, r.text
        assert r.json()["conn_type"] == "sleeper" and json.loads(r.json()["extra"]) == {"config_home": str(home)}
        r = c.post("/api/v2/connections/test", json={"connection_id": "sleeper_default", "conn_type": "sleeper"})
        assert r.status_code == 200, r.text
        assert r.json()["status"] is True and "Sleeper tables" in r.json()["message"], r.json()
        r = c.post("/api/v2/connections/test", json={"connection_id": "sleeper_elsewhere", "conn_type": "sleeper",
                                                      "extra": json.dumps({"config_home": str(home / "none")})})
        assert r.status_code == 200 and r.json()["status"] is False, r.text
        assert "has no sleeper.toml" in r.json()["message"] and "\n" not in r.json()["message"], r.json()
    assert "connection sleeper_default created" in (home / "airflow" / "standalone.log").read_text()


def test_the_flush_dag_runs_when_the_buffer_passes_its_threshold(airflow: dict[str, Any]) -> None:
    """The README's flush on threshold, end to end: records written over REST pass the
    table's flush threshold; the asset watcher's trigger, in Standalone's real triggerer,
    sees it and starts the flush DAG (an asset-triggered run, no cron, no manual run),
    which files them."""
    home: Path = airflow["home"]
    none = [f"--property=sleeper.table.schedule.{op}=none"
            for op in ("split", "compaction", "gc", "ingest_batcher", "flush")]
    _sleeper(home, "table", "create", "watched", "--schema", str(home / "schema.json"),
             "--property", "sleeper.table.write.buffer.flush.records=100",
             "--property", "sleeper.table.write.buffer.flush.age.seconds=3600", *none)
    dag_id = "sleeper_watched_flush"
    with _client(airflow) as c:
        _parsed(c, dag_id, "flush")
        r = c.post("/sleeper/api/v1/tables/watched/records",
                   json={"records": [{"key": k, "v": f"w-{k}"} for k in range(150)]})
        assert r.status_code == 201, r.text
        runs = _wait(c, f"/api/v2/dags/{dag_id}/dagRuns",
                     lambda b: any(run["state"] == "success" for run in b["dag_runs"]),
                     what="an asset-triggered flush run")["dag_runs"]
        assert {run["run_type"] for run in runs} == {"asset_triggered"}, runs
        files = c.get("/sleeper/api/v1/tables/watched/files").json()["files"]
        assert sum(ref["records"] for f in files for ref in f["references"]) == 150
        jobs = c.get("/sleeper/api/v1/tables/watched/jobs", params={"kind": "flush"}).json()
        assert [j["status"] for j in jobs] == ["committed"]


def test_a_deferred_bulk_import_frees_the_spark_slot_for_another_task_before_its_job_ends(
        airflow: dict[str, Any]) -> None:
    """Issue 21: the ``spark`` pool has one slot. Table ``waiting``'s bulk import is
    deferrable (``sleeper.table.spark.deferrable=true``); its job is held at a gate on the
    Spark service. While it is deferred, table ``other``'s bulk import (the same pool, not
    deferrable) runs its Spark job and succeeds; only then is the gate opened and the
    deferred import resumes in a worker and commits. Each table ends with exactly its
    day's 2,000 records."""
    home: Path = airflow["home"]
    gates, service = airflow["spark_gates"], airflow["spark_service"]
    gates["waiting"] = threading.Event()
    (home / "daily.json").write_text(DAILY_SCHEMA)
    days = [time.strftime("%Y-%m-%d", time.gmtime(time.time() - d * 86400)) for d in range(3)]
    timeline: list[tuple[float, str]] = []
    t0, t_wall = time.monotonic(), time.time()

    def note(what: str) -> None:
        timeline.append((round(time.monotonic() - t0, 1), what))

    def create(name: str, *props: str) -> str:
        raw = home / "ingest" / name
        for day in days:  # the scheduler's run reads its interval's date
            (raw / day).mkdir(parents=True, exist_ok=True)
            pq.write_table(_day_rows(day), raw / day / "events.parquet")
        none = [f"--property=sleeper.table.schedule.{op}=none"
                for op in ("split", "compaction", "gc", "ingest_batcher", "flush")]
        _sleeper(home, "table", "create", name, "--schema", str(home / "daily.json"),
                 "--property", f"sleeper.table.bulk.import.source={raw}/{{{{ data_interval_start | ds }}}}/",
                 # one scheduled run: yesterday's interval (a start further back runs each day since)
                 "--property", f"sleeper.table.bulk.import.start={days[1]}",
                 "--property", "sleeper.table.bulk.import.min.leaf.partitions=1", *props, *none)
        return f"sleeper_{name}_bulk_import"

    def task(c: Any, dag_id: str) -> dict[str, Any]:
        runs = c.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["dag_runs"]
        if not runs:
            return {}
        r = c.get(f"/api/v2/dags/{dag_id}/dagRuns/{runs[0]['dag_run_id']}/taskInstances/bulk_import")
        return r.json() if r.status_code == 200 else {}

    with _client(airflow) as c:
        assert c.get("/api/v2/pools/spark").json()["slots"] == 1
        waiting = create("waiting", "--property", "sleeper.table.spark.deferrable=true")
        _parsed(c, waiting, "bulk_import")
        note("waiting: DAG parsed")
        _wait(c, "/api/v2/pools/spark", lambda p: task(c, waiting).get("state") == "deferred", timeout=300,
              what="the waiting import to defer")
        note("waiting: bulk_import deferred (its Spark job held at the gate)")
        pool = c.get("/api/v2/pools/spark").json()
        assert (pool["include_deferred"], pool["open_slots"]) == (False, 1), f"a deferred task takes no slot: {pool}"
        other = create("other")
        _parsed(c, other, "bulk_import")
        note("other: DAG parsed")
        done = _wait(c, "/api/v2/pools/spark", lambda p: task(c, other).get("state") in ("success", "failed"),
                     timeout=400, what="the other import to end")
        other_ti = task(c, other)
        note(f"other: bulk_import {other_ti['state']} (ran {other_ti['start_date']} .. {other_ti['end_date']})")
        assert done and other_ti["state"] == "success", other_ti
        waiting_ti = task(c, waiting)
        assert waiting_ti["state"] == "deferred", "still waiting for its Spark job"
        held = [j for j in job_times(service) if j["table"] == "waiting"]
        assert [j["ended"] for j in held] == [None], "its Spark job has not ended"
        opened = time.time()
        gates["waiting"].set()
        note("gate opened: the waiting Spark job runs")
        _wait(c, "/api/v2/pools/spark", lambda p: task(c, waiting).get("state") in ("success", "failed"),
              timeout=400, what="the waiting import to end")
        waiting_ti = task(c, waiting)
        note(f"waiting: bulk_import {waiting_ti['state']} (ended {waiting_ti['end_date']})")
        assert waiting_ti["state"] == "success", waiting_ti
        job = next(j for j in job_times(service) if j["table"] == "waiting")
        other_job = next(j for j in job_times(service) if j["table"] == "other")
        assert job["submitted"] < other_job["submitted"] < other_job["ended"] < opened < job["ended"], \
            "the other Spark job ran, start to end, while the deferred import's job was held"
        at = {k: round(v - t_wall, 1) for k, v in (("waiting submitted", job["submitted"]),
                                                   ("other submitted", other_job["submitted"]),
                                                   ("other ended", other_job["ended"]), ("gate opened", opened),
                                                   ("waiting ended", job["ended"]))}
        note(f"Spark service jobs, seconds since the test started: {at}")
        for name in ("waiting", "other"):
            r = c.get(f"/sleeper/api/v1/tables/{name}/records",
                      params={"min": "0", "max": str(10**13), "limit": 100_000})
            got = r.json()["records"]
            assert len(got) == 2000 and len({x["key"] for x in got}) == 2000, (name, len(got))
    print("TIMELINE " + json.dumps(timeline))


# ----- issue 37: a job outlives its dead worker ---------------------------------------------------
def _task_process(ti: dict[str, Any]) -> int:
    """The pid of the LocalExecutor's forked process running ``ti`` (its process title
    names the task instance), checked through /proc before anything is killed."""
    pid = ti.get("pid")
    assert pid, f"no pid reported for the running task: {ti}"
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert f"airflow worker -- {ti['id']}" in cmdline, (pid, cmdline)
    return int(pid)


def test_a_bulk_import_whose_worker_is_killed_mid_job_reconnects_to_its_spark_job(airflow: dict[str, Any]) -> None:
    """Issue 37: two tables' blocking bulk imports (not deferrable) run on the Spark
    service, each job held at its gate. Each task's process (the LocalExecutor's fork) is
    SIGKILLed while its job runs; Airflow retries the task (after the table's retry delay,
    ``sleeper.table.dated.retry.delay.seconds``, 1 s here). Table
    ``resumed`` (``sleeper.table.spark.durable``, true by default) kept the job's id in
    the task state store: its retry reconnects to the running job, and the service saw 1
    submission. Table ``resubmitted`` (``sleeper.table.spark.durable=false``, the
    behaviour before) submits again: 2 submissions, the second waiting for the first.
    The gates open; both tasks succeed, and each table holds exactly its day's 2,000
    records (the import key keeps the repeat from adding any)."""
    home: Path = airflow["home"]
    gates, service = airflow["spark_gates"], airflow["spark_service"]
    (home / "daily.json").write_text(DAILY_SCHEMA)
    days = [time.strftime("%Y-%m-%d", time.gmtime(time.time() - d * 86400)) for d in range(3)]
    none = [f"--property=sleeper.table.schedule.{op}=none"
            for op in ("split", "compaction", "gc", "ingest_batcher", "flush")]
    retry = ["--property", "sleeper.table.dated.retry.delay.seconds=1"]  # not the 2 minutes of the default
    tables = {"resumed": retry, "resubmitted": [*retry, "--property", "sleeper.table.spark.durable=false"]}
    for name in tables:
        gates[name] = threading.Event()

    def submissions(name: str) -> int:
        return len([j for j in job_times(service) if j["table"] == name])

    def task(c: Any, name: str) -> dict[str, Any]:
        dag_id = f"sleeper_{name}_bulk_import"
        runs = c.get(f"/api/v2/dags/{dag_id}/dagRuns").json().get("dag_runs", [])
        if not runs:
            return {}
        r = c.get(f"/api/v2/dags/{dag_id}/dagRuns/{runs[0]['dag_run_id']}/taskInstances/bulk_import")
        return {**r.json(), "dag_run_id": runs[0]["dag_run_id"]} if r.status_code == 200 else {}

    def state_store(c: Any, name: str) -> dict[str, Any]:
        run_id = task(c, name)["dag_run_id"]
        r = c.get(f"/api/v2/dags/sleeper_{name}_bulk_import/dagRuns/{run_id}/taskInstances/bulk_import/state-store")
        return r.json() if r.status_code == 200 else {}

    with _client(airflow) as c:
        pool = c.get("/api/v2/pools/spark").json()

        def set_slots(n: int) -> Any:  # Airflow validates the whole pool; the mask changes the slots alone
            return c.patch("/api/v2/pools/spark", params={"update_mask": "slots"},
                           json={"pool": "spark", "slots": n, "include_deferred": pool["include_deferred"]})
        r = set_slots(2)  # both imports at once
        assert r.status_code == 200 and c.get("/api/v2/pools/spark").json()["slots"] == 2, r.text
        try:
            for name, props in tables.items():
                raw = home / "ingest" / name
                for day in days:
                    (raw / day).mkdir(parents=True, exist_ok=True)
                    pq.write_table(_day_rows(day), raw / day / "events.parquet")
                _sleeper(home, "table", "create", name, "--schema", str(home / "daily.json"),
                         "--property", f"sleeper.table.bulk.import.source={raw}/{{{{ data_interval_start | ds }}}}/",
                         "--property", f"sleeper.table.bulk.import.start={days[1]}",
                         "--property", "sleeper.table.bulk.import.min.leaf.partitions=1", *props, *none)
            request_parse(c, "bulk_import")  # one parse of the file makes both tables' DAGs
            for name in tables:
                dag = f"sleeper_{name}_bulk_import"
                _wait(c, f"/api/v2/dags/{dag}", lambda d, dag=dag: d.get("dag_id") == dag, what=f"the {dag} DAG")
            first: dict[str, dict[str, Any]] = {}
            for name in tables:  # each task running, its one Spark job held at the gate
                first[name] = _wait(c, "/api/v2/pools/spark", lambda p, n=name: (
                    task(c, n).get("state") == "running" and submissions(n) == 1 and task(c, n).get("pid")),
                    timeout=400, what=f"{name}'s bulk import to run its Spark job") and task(c, name)
            for name in tables:
                _wait(c, "/api/v2/pools/spark", lambda p, n=name: n == "resubmitted" or state_store(c, n).get(
                    "total_entries"), timeout=60, what=f"{name}'s job id in the task state store")
            for name in tables:
                os.kill(_task_process(first[name]), signal.SIGKILL)
            store: dict[str, Any] = {}
            for name in tables:  # retried by Airflow after the table's retry delay
                _wait(c, "/api/v2/pools/spark", lambda p, n=name: (
                    task(c, n).get("try_number", 0) >= 2 and task(c, n).get("state") == "running"),
                    timeout=400, what=f"{name}'s bulk import to be retried")
                store[name] = [(e["key"], e["value"]) for e in state_store(c, name).get("task_state_store", [])]
            _wait(c, "/api/v2/pools/spark", lambda p: submissions("resubmitted") == 2, timeout=120,
                  what="the resubmitted import's second job")
            # the durable retry logs that it follows its job before it would submit one: from that line on,
            # no submission of its can follow while the job is held
            _wait(c, "/api/v2/pools/spark", lambda p: "Reconnecting to existing job" in task_log(
                c, "sleeper_resumed_bulk_import", task(c, "resumed")["dag_run_id"], "bulk_import", 2),
                timeout=120, what="the resumed import's retry to reconnect to its held job")
            held = {name: submissions(name) for name in tables}
            for name in tables:
                gates[name].set()
            for name in tables:
                _wait(c, "/api/v2/pools/spark", lambda p, n=name: task(c, n).get("state") in ("success", "failed"),
                      timeout=400, what=f"{name}'s bulk import to end")
                ti = task(c, name)
                assert ti["state"] == "success", run_report(c, f"sleeper_{name}_bulk_import", ti["dag_run_id"])
            log = task_log(c, "sleeper_resumed_bulk_import", task(c, "resumed")["dag_run_id"], "bulk_import", 2)
            counts = {name: submissions(name) for name in tables}
            print("SUBMISSIONS " + json.dumps({"while_held": held, "at_the_end": counts, "state_store": store}))
            assert counts == {"resumed": 1, "resubmitted": 2}, (counts, store)
            assert "Reconnecting to existing job" in log, log[-3000:]
            for name in tables:
                r = c.get(f"/sleeper/api/v1/tables/{name}/records",
                          params={"min": "0", "max": str(10**13), "limit": 100_000})
                got = r.json()["records"]
                assert len(got) == 2000 and len({x["key"] for x in got}) == 2000, (name, len(got))
        finally:
            set_slots(pool["slots"])


def _sleeper_namespaces(events: list[dict[str, Any]], dag_id: str, table: str) -> set[str]:
    """The namespaces naming ``table`` in the COMPLETE events of ``dag_id``'s tasks."""
    return {d["namespace"] for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].startswith(dag_id)
            for d in (*e["inputs"], *e["outputs"]) if d["name"] == table}


def test_one_table_has_one_lineage_namespace_under_sleeper_airflow_a_scheduled_run_and_the_cluster(
        airflow: dict[str, Any], airflow_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37 item 3: the same table's datasets are named alike (``sleeper://<instance id>``,
    the embedded state store's own id) by (b) a flush task run by ``sleeper airflow``, (a)
    the same DAG run by ``dag.test()`` with only ``SLEEPER_HOME`` set (a scheduled run's
    view), and (c) the ``sleeper_default`` connection ``sleeper cluster`` gives its workers,
    pointed at the same server through its socket directory."""
    from dataclasses import replace

    from psycopg.conninfo import conninfo_to_dict

    from sleeper_ops import Sleeper
    from sleeper_ops.airflow.assets.sleeper import namespace
    from sleeper_ops.cluster.environment import (
        AWS_CONN,
        SLEEPER_CONN,
        PostgresAddress,
        compose_layout,
        process_environment,
    )
    from sleeper_ops.instance import forget_namespaces
    from tests.integration.test_dags import run_dags

    home: Path = airflow["home"]
    _sleeper(home, "table", "create", "traced", "--schema", str(home / "schema.json"),
             *[f"--property=sleeper.table.schedule.{op}=none"
               for op in ("split", "compaction", "gc", "ingest_batcher", "flush")])
    monkeypatch.delenv("SLEEPER_STATE_STORE_DSN", raising=False)
    with Sleeper(home) as s:
        expected = f"sleeper://{s.state_store.instance_id()}"
        dsn = s.state_store.dsn  # type: ignore[attr-defined]
    dag_id = "sleeper_traced_flush"
    # (b) under sleeper airflow
    with _client(airflow) as c:
        _parsed(c, dag_id, "flush")
        r = c.post("/sleeper/api/v1/tables/traced/records", json={"records": [{"key": 1, "v": "b"}]})
        assert r.status_code == 201, r.text
        _run_dag(c, dag_id)
    standalone = _sleeper_namespaces(lineage_events(home / "lineage"), dag_id, "traced")
    # (a) dag.test() with only SLEEPER_HOME
    with Sleeper(home) as s:
        s.table("traced").write([{"key": 2, "v": "a"}])
    runs = run_dags(airflow_home, home, {"dag_id": dag_id}, **lineage_env(tmp_path / "scheduled"))
    assert runs.results[0]["state"] == "success", runs.results
    scheduled = _sleeper_namespaces(lineage_events(tmp_path / "scheduled"), dag_id, "traced")
    # (c) the cluster's workers' connection, to the same server by its socket directory
    parts = conninfo_to_dict(dsn)
    layout = replace(compose_layout(), state_store="postgres", postgres=PostgresAddress(
        host=str(parts["host"]), port=None, login=str(parts.get("user") or "postgres"),
        password=str(parts.get("password") or ""), database=str(parts["dbname"])))
    worker = process_environment(layout, "worker-1")
    monkeypatch.setenv("AIRFLOW_CONN_SLEEPER_DEFAULT", worker[SLEEPER_CONN])
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", worker[AWS_CONN])
    forget_namespaces()
    cluster = namespace()
    print(f"namespaces: sleeper airflow {standalone}, scheduled run {scheduled}, cluster {cluster!r}")
    assert standalone == scheduled == {expected} and cluster == expected
