"""The Spark service's job handling and its client, without Spark: the service runs a
fake executor behind its real HTTP API on a loopback port."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

from sleeper_ops.config import SleeperConfig
from sleeper_ops.errors import ConfigError
from sleeper_ops.spark import service_client
from sleeper_ops.spark.service import SparkService, failure_reason, http_server
from sleeper_ops.spark.service_client import JobLostError, run_on_service
from statestore.errors import SleeperError

CONFIG = {"home": "/nonexistent-home", "object_store": {"uri": "data"}}


class Served:
    def __init__(self, execute, max_jobs: int = 2, port: int = 0) -> None:
        self.service = SparkService(None, max_jobs=max_jobs, execute=execute)
        self.server = http_server(self.service, "127.0.0.1", port)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served():
    started: list[Served] = []

    def start(execute, **kw) -> Served:
        s = Served(execute, **kw)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()


def _post(url: str, body: dict) -> tuple[int, dict]:
    return service_client._call(f"{url}/jobs", "POST", body)


def test_a_submission_repeated_under_its_id_runs_once_and_answers_the_same_job(served):
    runs = []
    s = served(lambda job: runs.append(job.id) or {"error": None, "n": len(runs)})
    body = {"id": "job-1", "kind": "bulk_import", "table": "t", "config": CONFIG, "sources": ["x"]}
    first, doc1 = _post(s.url, body)
    second, doc2 = _post(s.url, body)
    done = run_on_service(s.url, {"kind": "compaction", "table": "t", "config": CONFIG})
    assert (first, second) == (202, 200) and doc1["id"] == doc2["id"] == "job-1"
    assert done["state"] == "succeeded" and sorted(runs) == sorted(["job-1", done["id"]])
    assert s.service.get("job-1").outcome == {"error": None, "n": 1}


def test_a_job_that_fails_ends_failed_with_its_reason(served):
    def execute(job):
        raise SleeperError("table t has no partition p")
    s = served(execute)
    doc = run_on_service(s.url, {"kind": "compaction", "table": "t", "config": CONFIG})
    assert doc["state"] == "failed" and doc["error"] == "SleeperError: table t has no partition p"


@pytest.mark.parametrize("body, message", [
    ({"kind": "wipe", "table": "t", "config": CONFIG}, "unknown job kind 'wipe'"),
    ({"kind": "compaction", "table": "", "config": CONFIG}, "the table's name"),
    ({"kind": "compaction", "table": "t"}, "configuration, with its home"),
])
def test_a_malformed_request_is_refused_with_why_and_nothing_runs(served, body, message):
    runs = []
    s = served(lambda job: runs.append(job) or {"error": None})
    code, doc = _post(s.url, {"id": "j", **body})
    assert code == 400 and message in doc["error"] and runs == []
    from sleeper_ops.spark.batch_files import SparkBatchError
    with pytest.raises(SparkBatchError, match="refused the job"):
        run_on_service(s.url, body)


def test_jobs_of_one_table_run_one_at_a_time_and_other_tables_alongside(served):
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    lock = threading.Lock()
    both_tables = threading.Barrier(2, timeout=10)

    def execute(job):
        with lock:
            running[job.table] = running.get(job.table, 0) + 1
            most[job.table] = max(most.get(job.table, 0), running[job.table])
        if job.request.get("meet"):
            both_tables.wait()  # returns only if a job of the other table runs at the same time
        with lock:
            running[job.table] -= 1
        return {"error": None}
    s = served(execute, max_jobs=2)  # table a's queued jobs hold no slot: b's job runs alongside
    jobs = [{"kind": "bulk_import", "table": "a", "config": CONFIG, "sources": ["x"]} for _ in range(3)]
    jobs += [{"kind": "bulk_import", "table": "b", "config": CONFIG, "sources": ["x"], "meet": True},
             {"kind": "bulk_import", "table": "a", "config": CONFIG, "sources": ["x"], "meet": True}]
    results: list[dict] = []
    threads = [threading.Thread(target=lambda j=j: results.append(run_on_service(s.url, j))) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [r["state"] for r in results] == ["succeeded"] * 5
    assert most == {"a": 1, "b": 1}


def test_a_job_lost_by_a_service_restart_is_reported_lost(served, monkeypatch):
    monkeypatch.setattr(service_client, "WAIT_SECONDS", 0.5)
    release = threading.Event()
    first = served(lambda job: release.wait(30) and {"error": None})
    port = first.server.server_address[1]
    outcome: list[BaseException] = []

    def client() -> None:
        try:
            run_on_service(first.url, {"kind": "compaction", "table": "t", "config": CONFIG})
        except BaseException as e:
            outcome.append(e)
    t = threading.Thread(target=client)
    t.start()
    deadline = threading.Event()
    while not first.service.counts().get("running") and not deadline.wait(0.05):
        pass
    first.stop()  # the service goes away with its job in flight ...
    served(lambda job: {"error": None}, port=port)  # ... and comes back, knowing nothing of it
    t.join(60)
    release.set()
    assert len(outcome) == 1 and isinstance(outcome[0], JobLostError), outcome
    assert "lost job" in str(outcome[0]) and "restarted" in str(outcome[0])


def test_job_status_answers_a_running_job_and_an_ended_ones_result_to_another_client(served):
    """What a retried task asks about the job an earlier try submitted: its state while
    it runs, its state and outcome (the job's result) once it ended."""
    release = threading.Event()
    s = served(lambda job: release.wait(30) and {"error": None, "result": {"records": 7}})
    job_id, instance = service_client.submit_job(s.url, {"kind": "bulk_import", "table": "t", "config": CONFIG,
                                                         "sources": ["x"]})
    while service_client.job_status(s.url, job_id, instance)["state"] == "queued":
        pass
    assert service_client.job_status(s.url, job_id, instance)["state"] == "running"
    assert "running" in service_client.ACTIVE_STATES and "queued" in service_client.ACTIVE_STATES
    release.set()
    ended = service_client.wait_for_job(s.url, job_id, instance)
    assert ended["state"] == "succeeded" and ended["outcome"]["result"] == {"records": 7}
    again = service_client.job_status(s.url, job_id, instance)
    assert (again["state"], again["outcome"]) == ("succeeded", ended["outcome"])


def test_job_status_answers_lost_for_a_job_unknown_restarted_or_unreachable(served):
    s = served(lambda job: {"error": None})
    job_id, instance = service_client.submit_job(s.url, {"kind": "compaction", "table": "t", "config": CONFIG})
    service_client.wait_for_job(s.url, job_id, instance)
    unknown = service_client.job_status(s.url, "never-submitted", None)
    assert unknown["state"] == service_client.LOST and "lost job never-submitted" in unknown["error"]
    restarted = service_client.job_status(s.url, job_id, "an-earlier-instance")
    assert restarted["state"] == service_client.LOST
    port = s.server.server_address[1]
    s.stop()
    gone = service_client.job_status(f"http://127.0.0.1:{port}", job_id, instance, unreachable_for=0.0)
    assert gone["state"] == service_client.LOST and "unreachable" in gone["error"]


def test_health_names_the_instance_and_counts_the_jobs(served):
    s = served(lambda job: {"error": None})
    run_on_service(s.url, {"kind": "compaction", "table": "t", "config": CONFIG})
    with urllib.request.urlopen(f"{s.url}/health", timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["instance"] == s.service.instance and doc["jobs"] == {"succeeded": 1}


def test_failure_reason_keeps_the_python_error_and_sparks_summary_of_a_task_failure():
    text = ("An error occurred while calling o87.collectAndServe.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 4 "
            "times, most recent failure: Lost task 0.3 in stage 3.0 (TID 9): "
            "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
            '  File "/x/worker.py", line 1, in main\n    process()\n'
            "sleeper_ops.errors.IngestError: f.parquet: column 'key' holds string\n\n"
            "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)\n")
    assert failure_reason(RuntimeError(text)) == ("sleeper_ops.errors.IngestError: f.parquet: column 'key' holds "
                                                  "string (Spark: Task 0 in stage 3.0 failed 4 times)")
    assert failure_reason(SleeperError("no table t")) == "SleeperError: no table t"


def test_spark_service_is_read_from_the_configuration_and_checked():
    c = SleeperConfig.from_dict(Path("/h"), {"spark": {"master": "spark://m:7077", "service": "http://m:8998/"}})
    assert c.spark_service == "http://m:8998"
    assert SleeperConfig.from_dict(c.home, c.to_dict()) == c
    assert SleeperConfig.from_dict(Path("/h"), {}).spark_service is None
    with pytest.raises(ConfigError, match="spark.service must be an http"):
        SleeperConfig.from_dict(Path("/h"), {"spark": {"service": "m:8998"}})


def test_the_airflow_connection_extra_names_the_spark_service():
    from sleeper_ops.airflow.hooks.connection import config_from_connection

    c = config_from_connection(host=None, port=None, login=None, password=None, schema=None,
                               extra={"spark_service": "http://10.0.0.5:8998"}, default_home=Path("/h"))
    assert c.spark_service == "http://10.0.0.5:8998"
