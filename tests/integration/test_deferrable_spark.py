"""Deferrable Spark tasks under ``dag.test()`` (which runs a deferred task's trigger inline):
a bulk import sent to the Spark service waits in its trigger, resumes and announces its
commit once; a service that restarts loses the job and the state store decides, so the
import is neither counted twice nor lost. The service is the real HTTP API with an
in-process job runner (tests/integration/spark_service_double.py); the real-worker proof
(a worker slot used by another task while the import waits) is in
test_airflow_end_to_end.py."""

from __future__ import annotations

import threading
import tomllib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tomli_w

from sleeper_ops import Sleeper
from sleeper_ops.spark.service import SparkService, http_server
from tests.integration import test_dags as dag_tests
from tests.integration.dag_server import DagServer, start_in_server
from tests.integration.spark_service_double import in_process_executor, serve, wait_for

pytestmark = pytest.mark.integration

sleeper_home = dag_tests.sleeper_home
sleeper = dag_tests.sleeper
DAGS = Path(__file__).with_name("deferrable")
NO_PRESPLIT = {"sleeper.table.bulk.import.min.leaf.partitions": "1"}


def _rows(prefix: str, n: int) -> pa.Table:
    return pa.table({"key": [f"{prefix}{i:05d}" for i in range(n)], "ts": pa.array(range(n), pa.int64()),
                     "value": ["v"] * n})


def _use_service(sleeper_home: Path, url: str) -> None:
    path = sleeper_home / "sleeper.toml"
    raw = tomllib.loads(path.read_text())
    raw["spark"] = {"master": "local[2]", "service": url}
    path.write_text(tomli_w.dumps(raw))


def _start(airflow_home: Path, sleeper_home: Path, *runs: dict[str, Any]) -> DagServer:
    """``runs`` started in this worker's DAG server for this folder (one Airflow start for
    the module's tests, not one a test); ``_finish`` waits for them."""
    return start_in_server(DAGS, airflow_home, dag_tests._env(airflow_home, None, AIRFLOW__CORE__DAGS_FOLDER=str(DAGS)),
                           {"SLEEPER_HOME": str(sleeper_home)}, list(runs))


def _finish(server: DagServer, n: int) -> dag_tests.Runs:
    return dag_tests.runs_of(server.collect(300), n)


def _records(sleeper: Sleeper) -> int:
    return sleeper.table("events").query(ranges=[("", None)]).num_rows


def test_a_deferred_bulk_import_commits_while_its_task_waits_and_announces_it_once(
        sleeper: Sleeper, sleeper_home: Path, airflow_home: Path, tmp_path: Path) -> None:
    sleeper.create_table("events", dag_tests.SCHEMA, split_points=["m", "t"], properties=NO_PRESPLIT)
    source = tmp_path / "day-1.parquet"
    pq.write_table(_rows("b", 120), source)  # every key below "m": one leaf
    gate = threading.Event()
    with serve(in_process_executor({"events": gate})) as (url, service):
        _use_service(sleeper_home, url)
        conf = {"source": str(source), "key": "day-1"}
        proc = _start(airflow_home, sleeper_home, {"dag_id": "deferred_import", "conf": conf},
                      {"dag_id": "deferred_import", "conf": conf})
        try:
            job = wait_for(lambda: next(iter(service._jobs.values()), None), 120, "the import to reach the service")
            assert job.state in ("queued", "running") and _records(sleeper) == 0, "held at the gate: nothing yet"
        finally:
            gate.set()
        runs = _finish(proc, 2)
    assert [r["state"] for r in runs.results] == ["success", "success"], runs.logs[0][-3000:]
    assert "[DAG TEST] running trigger in line" in runs.logs[0], "the task deferred"
    assert "running trigger in line" not in runs.logs[1], "the key was imported: nothing to wait for"
    assert "already imported" in runs.logs[1]
    ((event,),) = [runs.results[0]["asset_events"]]
    assert event["extra"] == {"table": "events", "files": 1, "rows": 120, "import_key": "day-1",
                              "transaction": sleeper.state_store.transaction_number(
                                  sleeper.table("events").info.table_id),
                              "key_range": {"field": "key", "min": "", "max": "m"}}
    assert "asset_events" not in runs.results[1]
    assert len(service._jobs) == 1 and _records(sleeper) == 120


def test_a_service_restart_loses_the_job_and_the_state_store_decides_neither_twice_nor_lost(
        sleeper: Sleeper, sleeper_home: Path, airflow_home: Path, tmp_path: Path) -> None:
    """Run 1: the service restarts after the import committed: the task succeeds from the
    job record (no second commit). Run 2 (key day-2): it restarts before the import ran:
    the task fails, nothing committed; run 3 retries day-2 on the new service: added once."""
    sleeper.create_table("events", dag_tests.SCHEMA, properties=NO_PRESPLIT)
    for day, prefix in (("day-1", "a"), ("day-2", "c")):
        pq.write_table(_rows(prefix, 100), tmp_path / f"{day}.parquet")
    servers: list[Any] = []

    def start(service: SparkService) -> SparkService:  # on the same address each time
        if servers:
            servers[-1].shutdown()
            servers[-1].server_close()
        servers.append(http_server(service, "127.0.0.1", servers[-1].server_address[1] if servers else 0))
        threading.Thread(target=servers[-1].serve_forever, daemon=True).start()
        return service

    committed_held = threading.Event()
    first = start(SparkService(None, execute=in_process_executor({}, after_commit={"events": committed_held})))
    _use_service(sleeper_home, f"http://127.0.0.1:{servers[-1].server_address[1]}")
    runs = [{"dag_id": "deferred_import", "conf": {"source": str(tmp_path / f"{d}.parquet"), "key": d}}
            for d in ("day-1", "day-2", "day-2")]
    proc = _start(airflow_home, sleeper_home, *runs)
    try:
        wait_for(lambda: _records(sleeper) == 100, 120, "day-1 to commit")
        assert [j.state for j in first._jobs.values()] == ["running"], "committed, not yet reported"
        never = threading.Event()  # day-2 never runs on the second service
        second = start(SparkService(None, execute=in_process_executor({"events": never})))
        wait_for(lambda: second._jobs, 120, "day-2 to reach the second service")
        start(SparkService(None, execute=in_process_executor({})))
        result = _finish(proc, 3)
    finally:
        committed_held.set()
        servers[-1].shutdown()
    states = [r["state"] for r in result.results]
    assert states == ["success", "failed", "success"], result.logs
    assert "lost job" in result.logs[0] and "but its commit had landed" in result.logs[0]
    assert "not committed when checked" in result.logs[1]
    assert [e["extra"]["rows"] for e in result.results[0]["asset_events"]] == [100]
    assert "asset_events" not in result.results[1]
    assert [e["extra"]["rows"] for e in result.results[2]["asset_events"]] == [100]
    assert _records(sleeper) == 200, "each day once"
    assert sorted(j.status for j in sleeper.table("events").jobs(kind="bulk_import")) == ["committed", "committed"]


def test_the_generated_compaction_dag_defers_its_spark_batch_when_the_table_says_so(
        sleeper: Sleeper, sleeper_home: Path, airflow_home: Path) -> None:
    """``sleeper.table.spark.deferrable=true``: the compaction DAG's ``run_spark`` task
    sends the batch to the service and defers; while the batch is held, the run keeps the
    table's compaction lease; resumed, it reports every job committed."""
    from sleeper_ops.maintenance.leases import lease_name

    table = dag_tests._filled_table(sleeper, "events", **{"sleeper.table.spark.deferrable": "true"})
    gate = threading.Event()
    with serve(in_process_executor({"events": gate})) as (url, service):
        _use_service(sleeper_home, url)
        proc = start_in_server(dag_tests.DAGS, airflow_home, dag_tests._env(airflow_home, None),
                               {"SLEEPER_HOME": str(sleeper_home)},
                               [{"dag_id": "sleeper_events_compaction", "conf": {"runner": "spark"}}])
        try:
            wait_for(lambda: service._jobs, 120, "the batch to reach the service")
            lease = sleeper.state_store.get_lease(lease_name(table.info.table_id, "compaction"))
            assert lease is not None and lease.holder.startswith("sleeper_events_compaction/"), lease
        finally:
            gate.set()
        runs = _finish(proc, 1)
    assert runs.results[0]["state"] == "success", runs.logs[0][-3000:]
    assert runs.results[0]["tasks"]["run_spark"] == "success"
    assert "[DAG TEST] running trigger in line" in runs.logs[0], "run_spark deferred"
    assert [j["kind"] for j in (j.request for j in service._jobs.values())] == ["compaction"]
    assert set(dag_tests._references_per_leaf(table).values()) == {1}
    assert table.query(ranges=[("", None)]).num_rows == 3000
    assert {j.status for j in table.jobs(kind="compaction")} == {"committed"}
    assert sleeper.state_store.get_lease(lease_name(table.info.table_id, "compaction")) is None, "released by report"
