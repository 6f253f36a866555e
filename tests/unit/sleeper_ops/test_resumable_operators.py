"""Jobs that outlive a dead worker (issue 37): the blocking bulk import and Spark
compaction operators on the Spark service, and the EMR Serverless operator, keep their
job's id in the task state store before they wait; a retry with that id waits for a
running job, takes a succeeded job's result, and submits again after a failed or lost
one. The service and EMR are fakes here (what was submitted, what each job's state
is); the task state store is a dict, as Airflow's keeps one per task instance across
its tries."""

from __future__ import annotations

import collections
import contextlib
from dataclasses import asdict
from types import SimpleNamespace
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("airflow")

from sleeper_ops.airflow.operators import resumable
from sleeper_ops.airflow.operators.bulk_import import SleeperBulkImportOperator, task_import_key
from sleeper_ops.airflow.operators.emr import SleeperEmrServerlessStartJobOperator
from sleeper_ops.airflow.operators.resumable import SERVICE_JOB_KEY
from sleeper_ops.airflow.operators.spark_compaction import SleeperSparkCompactionOperator
from sleeper_ops.api import Sleeper
from sleeper_ops.bulk_import.job import BulkImportResult
from sleeper_ops.compaction.jobs import CompactionJob
from sleeper_ops.spark import service_client
from sleeper_ops.spark.batch_files import BulkImportError
from statestore.errors import SleeperError

SERVICE = "http://spark-service.invalid:8998"
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}


class TaskStateStore(dict):
    """Airflow's task state store of one task instance: kept across its tries."""

    def set(self, key: str, value: Any, **_: Any) -> None:
        assert value is not None
        self[key] = value


class FakeService:
    """The Spark service's client calls: submissions counted, each job's state set by the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, store: TaskStateStore) -> None:
        self.requests: list[dict[str, Any]] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.stored_before_wait: list[Any] = []
        self.waited: list[str] = []
        self.store = store
        self.outcome: dict[str, Any] = {"error": None}
        self.ends_as: tuple[str, Optional[dict[str, Any]]] = ("succeeded", None)
        monkeypatch.setattr(service_client, "submit_job", self.submit)
        monkeypatch.setattr(service_client, "wait_for_job", self.wait)
        monkeypatch.setattr(resumable, "wait_for_job", self.wait)
        monkeypatch.setattr(resumable, "job_status", self.status)

    def submit(self, service: str, request: dict[str, Any]) -> tuple[str, str]:
        assert service == SERVICE
        job_id = f"job-{len(self.requests) + 1}"
        self.requests.append(request)
        self.jobs[job_id] = {"id": job_id, "state": "running", "instance": "i1"}
        return job_id, "i1"

    def status(self, service: str, job_id: str, instance: Optional[str] = None) -> dict[str, Any]:
        return self.jobs.get(job_id) or {"id": job_id, "state": "lost", "error": f"lost job {job_id}"}

    def end(self, job_id: str, state: str = "succeeded", outcome: Optional[dict[str, Any]] = None) -> None:
        self.jobs[job_id].update(state=state, outcome=outcome if outcome is not None else self.outcome,
                                 error=None if state == "succeeded" else (outcome or {}).get("error", "it broke"))

    def wait(self, service: str, job_id: str, instance: Optional[str], **_: Any) -> dict[str, Any]:
        self.stored_before_wait.append(self.store.get(SERVICE_JOB_KEY))
        self.waited.append(job_id)
        if self.jobs[job_id]["state"] in ("queued", "running"):
            self.end(job_id, *self.ends_as)
        return self.jobs[job_id]


@pytest.fixture
def sleeper(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text(f'[state_store]\nbackend = "memory"\n[spark]\nservice = "{SERVICE}"\n')
    with Sleeper(home) as s:
        s.create_table("events", SCHEMA)
        yield s


@pytest.fixture
def store() -> TaskStateStore:
    return TaskStateStore()


@pytest.fixture
def service(monkeypatch, store) -> FakeService:
    return FakeService(monkeypatch, store)


def run_try(operator: Any, sleeper: Any, store: TaskStateStore, try_number: int = 1) -> Any:
    """One try of ``operator``'s task instance (the same run, the same task state store)."""
    operator.__dict__["hook"] = SimpleNamespace(get_conn=lambda: contextlib.nullcontext(sleeper))
    ti = SimpleNamespace(dag_id="sleeper_events_bulk_import", run_id="scheduled__1", try_number=try_number,
                         task_id=operator.task_id, map_index=-1, stats_tags={})
    events: Any = collections.defaultdict(lambda: SimpleNamespace(add=lambda *a, **k: None))
    return operator.execute({"ti": ti, "run_id": "scheduled__1", "outlet_events": events,
                             "task_state_store": store})


# ----- bulk import ------------------------------------------------------------------------------
@pytest.fixture
def source(tmp_path) -> str:
    path = tmp_path / "in" / "part-0.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"key": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}), path)
    return str(path.parent)


def imported(key: str, records: int = 3) -> dict[str, Any]:
    return {"result": asdict(BulkImportResult("events", key, "bulk-x", "committed", records=records,
                                              files_written=["f1"])), "error": None}


def importer(source: str, **kw: Any) -> SleeperBulkImportOperator:
    return SleeperBulkImportOperator(task_id="bulk_import", table="events", source=source, **kw)


def test_bulk_import_stores_its_job_before_waiting_and_reports_the_result_once(sleeper, store, service, source,
                                                                              monkeypatch):
    service.outcome = imported("k1")
    reports: list[Any] = []
    report = SleeperBulkImportOperator._report
    monkeypatch.setattr(SleeperBulkImportOperator, "_report",
                        lambda self, *a, **k: reports.append(a[1]) or report(self, *a, **k))
    out = run_try(importer(source, import_key="k1"), sleeper, store)
    assert len(reports) == 1, "one asset event, one lineage, one log line"
    assert len(service.requests) == 1 and service.requests[0]["import_key"] == "k1"
    ref = {"service": SERVICE, "job_id": "job-1", "instance": "i1"}
    assert service.stored_before_wait == [ref] and store[SERVICE_JOB_KEY] == ref
    assert (out["status"], out["records"], out["files"]) == ("committed", 3, ["f1"])


def test_a_retry_after_a_dead_worker_waits_for_the_running_job_and_submits_nothing(sleeper, store, service, source):
    service.outcome = imported("k1")
    service.submit(SERVICE, {"the first try": True})  # the first try's job, still running on the service
    store.set(SERVICE_JOB_KEY, {"service": SERVICE, "job_id": "job-1", "instance": "i1"})
    out = run_try(importer(source, import_key="k1"), sleeper, store, try_number=2)
    assert len(service.requests) == 1, "no second submission"
    assert service.waited == ["job-1"] and out["records"] == 3 and out["status"] == "committed"


def test_a_retry_takes_the_result_of_a_job_that_succeeded_without_waiting(sleeper, store, service, source):
    service.submit(SERVICE, {})
    service.end("job-1", outcome=imported("k1", records=5))
    store.set(SERVICE_JOB_KEY, {"service": SERVICE, "job_id": "job-1", "instance": "i1"})
    out = run_try(importer(source, import_key="k1"), sleeper, store, try_number=2)
    assert len(service.requests) == 1 and service.waited == [] and out["records"] == 5


@pytest.mark.parametrize("state", ["failed", "lost"])
def test_a_retry_submits_again_after_a_job_that_failed_or_was_lost(sleeper, store, service, source, state):
    service.outcome = imported("k1")
    if state == "failed":
        service.submit(SERVICE, {})
        service.end("job-1", "failed", {"error": "it broke"})
    store.set(SERVICE_JOB_KEY, {"service": SERVICE, "job_id": "job-1", "instance": "i1"})
    out = run_try(importer(source, import_key="k1"), sleeper, store, try_number=2)
    new = f"job-{len(service.requests)}"
    assert service.requests[-1].get("import_key") == "k1" and store[SERVICE_JOB_KEY]["job_id"] == new
    assert out["status"] == "committed"


def test_a_job_that_fails_again_fails_the_try_in_one_line_naming_the_table_and_key(sleeper, store, service,
                                                                                  source):
    service.submit(SERVICE, {})
    service.end("job-1", "failed", {"error": "a source vanished"})
    store.set(SERVICE_JOB_KEY, {"service": SERVICE, "job_id": "job-1", "instance": "i1"})
    service.ends_as = ("failed", {"error": "a source vanished"})
    with pytest.raises(BulkImportError, match=r"^bulk import into events \(import key 'k1', job bulk-\w+\) "
                                              r"failed: a source vanished$"):
        run_try(importer(source, import_key="k1"), sleeper, store, try_number=2)
    assert len(service.requests) == 2


def test_the_default_import_key_of_a_durable_task_is_the_task_instances(sleeper, store, service, source):
    service.outcome = imported("x")
    run_try(importer(source), sleeper, store)
    assert service.requests[0]["import_key"] == "sleeper_events_bulk_import/scheduled__1/bulk_import"
    ti = SimpleNamespace(dag_id="sleeper_events_bulk_import", run_id="scheduled__1", task_id="bulk_import",
                         map_index=-1)
    assert task_import_key({"ti": ti}) == service.requests[0]["import_key"]


def test_without_durable_every_try_submits_its_own_job(sleeper, store, service, source):
    service.outcome = imported("k1")
    for attempt in (1, 2):
        run_try(importer(source, import_key="k1", durable=False), sleeper, store, try_number=attempt)
    assert len(service.requests) == 2 and SERVICE_JOB_KEY not in store


def test_an_import_key_already_committed_submits_nothing(sleeper, store, service, source, monkeypatch):
    monkeypatch.setattr("sleeper_ops.api.Table.already_imported",
                        lambda self, key, sources=None: BulkImportResult("events", key, "bulk-x", "already imported"))
    out = run_try(importer(source, import_key="k1"), sleeper, store)
    assert service.requests == [] and out["status"] == "already imported" and SERVICE_JOB_KEY not in store


def test_durable_is_user_settable_and_on_by_default(source):
    assert importer(source).durable is True and importer(source, durable=False).durable is False
    dag_default = SleeperSparkCompactionOperator(task_id="run_spark", table="events", jobs=[], durable=False)
    assert dag_default.durable is False


# ----- Spark compaction ---------------------------------------------------------------------------
def compaction_jobs(sleeper: Any) -> list[CompactionJob]:
    tid = sleeper.table("events").info.table_id
    return [CompactionJob(tid, f"c{i}", "root", (f"in-{i}.parquet",)) for i in (1, 2)]


def committed(jobs: list[CompactionJob]) -> dict[str, Any]:
    return {"version": 1, "error": None, "results": [
        {"job_id": j.job_id, "status": "committed", "rows_read": 10, "rows_written": 10, "seconds": 1.0,
         "output": "o", "reason": None} for j in jobs]}


def compactor(jobs: list[CompactionJob], **kw: Any) -> SleeperSparkCompactionOperator:
    return SleeperSparkCompactionOperator(task_id="run_spark", table="events", jobs=[j.to_dict() for j in jobs],
                                          **kw)


def test_a_compaction_retry_waits_for_the_batch_of_the_dead_try(sleeper, store, service):
    jobs = compaction_jobs(sleeper)
    service.outcome = committed(jobs)
    run_try(compactor(jobs), sleeper, store)
    assert [r["kind"] for r in service.requests] == ["compaction"]
    assert service.stored_before_wait == [{"service": SERVICE, "job_id": "job-1", "instance": "i1"}]
    service.jobs["job-1"].update(state="running")  # as if the first try's worker died while it ran
    run_try(compactor(jobs), sleeper, store, try_number=2)
    assert len(service.requests) == 1 and service.waited == ["job-1", "job-1"]


def test_a_compaction_retry_after_a_failed_batch_sends_it_again_and_fails_naming_the_jobs(sleeper, store, service):
    jobs = compaction_jobs(sleeper)
    service.outcome = {"version": 1, "error": None, "results": [
        {"job_id": "c1", "status": "failed", "rows_read": 0, "rows_written": 0, "seconds": 0.0, "output": None,
         "reason": "bad input"}, committed(jobs)["results"][1]]}
    service.submit(SERVICE, {})
    service.end("job-1", "failed", {"error": "lost executor"})
    store.set(SERVICE_JOB_KEY, {"service": SERVICE, "job_id": "job-1", "instance": "i1"})
    with pytest.raises(SleeperError, match=r"^events: 1 of 2 compaction jobs failed on Spark: job c1: bad input$"):
        run_try(compactor(jobs), sleeper, store, try_number=2)
    assert len(service.requests) == 2


def test_a_compaction_without_durable_sends_the_batch_on_every_try(sleeper, store, service):
    jobs = compaction_jobs(sleeper)
    service.outcome = committed(jobs)
    for attempt in (1, 2):
        run_try(compactor(jobs, durable=False), sleeper, store, try_number=attempt)
    assert len(service.requests) == 2 and SERVICE_JOB_KEY not in store


# ----- EMR Serverless ----------------------------------------------------------------------------
class FakeEmr:
    """The EMR Serverless calls the operator makes: job runs started, each one's state."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.states: dict[str, str] = {}

    def get_application(self, applicationId: str) -> dict[str, Any]:
        return {"application": {"state": "STARTED"}}

    def start_job_run(self, **args: Any) -> dict[str, Any]:
        job = f"run-{len(self.started) + 1}"
        self.started.append(args["clientToken"])
        self.states[job] = "RUNNING"
        return {"jobRunId": job, "ResponseMetadata": {"HTTPStatusCode": 200}}

    def get_job_run(self, applicationId: str, jobRunId: str) -> dict[str, Any]:
        return {"jobRun": {"state": self.states[jobRunId], "stateDetails": ""}}


@pytest.fixture
def emr(monkeypatch) -> FakeEmr:
    fake = FakeEmr()
    from sleeper_ops.airflow.operators import emr as module

    waited: list[str] = []

    def wait(*, args: dict[str, Any], **_: Any) -> None:
        waited.append(args["jobRunId"])
        if fake.states[args["jobRunId"]] != "SUCCESS":
            fake.states[args["jobRunId"]] = "SUCCESS"
    monkeypatch.setattr(module, "wait", wait)
    fake.waited = waited  # type: ignore[attr-defined]
    return fake


def emr_try(fake: FakeEmr, store: TaskStateStore, **kw: Any) -> Any:
    op = SleeperEmrServerlessStartJobOperator(task_id="bulk_import", application_id="app", execution_role_arn="r",
                                              job_driver={}, configuration_overrides=None, deferrable=False,
                                              wait_for_completion=True, enable_application_ui_links=False, **kw)
    op.__dict__["hook"] = SimpleNamespace(conn=fake, get_waiter=lambda name: None)
    ti = SimpleNamespace(stats_tags={})
    return op.execute({"ti": ti, "task_state_store": store})


def test_emr_stores_the_job_run_and_a_retry_waits_for_it_or_takes_its_success(emr, store):
    assert emr_try(emr, store) == "run-1"
    assert store["emr_serverless_job_run_id"] == "run-1" and emr.waited == ["run-1"]
    emr.states["run-1"] = "RUNNING"  # the worker died while it ran
    assert emr_try(emr, store) == "run-1" and len(emr.started) == 1 and emr.waited == ["run-1", "run-1"]
    assert emr_try(emr, store) == "run-1" and len(emr.started) == 1 and emr.waited == ["run-1", "run-1"]


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED", "CANCELLING"])
def test_emr_retry_after_a_job_run_that_failed_starts_another_with_a_fresh_token(emr, store, state):
    emr_try(emr, store)
    emr.states["run-1"] = state
    assert emr_try(emr, store) == "run-2" and store["emr_serverless_job_run_id"] == "run-2"
    assert len(set(emr.started)) == 2


def test_emr_without_durable_starts_a_job_run_on_every_try(emr, store):
    emr_try(emr, store, durable=False)
    emr.states["run-1"] = "RUNNING"
    assert emr_try(emr, store, durable=False) == "run-2" and "emr_serverless_job_run_id" not in store


# ----- export ---------------------------------------------------------------------------------------
def exported(sleeper: Any, destination: str, key: str, rows: int = 3) -> dict[str, Any]:
    from sleeper_ops.io.export_manifest import ExportedFile, ExportManifest
    from sleeper_ops.query.export import ExportResult

    info = sleeper.table("events").info
    manifest = ExportManifest("events", info.table_id, key, 1, 0, [], None, True, "",
                              (ExportedFile("root", "part-00000-root.parquet", rows),))
    return {"result": ExportResult(destination, manifest, True).to_dict(), "error": None}


def exporter(destination: str, **kw: Any) -> Any:
    from sleeper_ops.airflow.operators.export import SleeperExportOperator

    return SleeperExportOperator(task_id="export", table="events", destination=destination, **kw)


def test_a_spark_export_runs_on_the_service_and_a_retry_reconnects_to_it(sleeper, store, service, tmp_path):
    dest = str(tmp_path / "out")
    service.outcome = exported(sleeper, dest, "e1")
    out = run_try(exporter(dest, export_key="e1", runner="spark"), sleeper, store)
    [request] = service.requests
    assert (request["kind"], request["destination"], request["export_key"]) == ("export", dest, "e1")
    assert service.stored_before_wait == [{"service": SERVICE, "job_id": "job-1", "instance": "i1"}]
    assert (out["records"], out["files"], out["written"], out["export_key"]) == (3, 1, True, "e1")
    service.jobs["job-1"]["state"] = "running"  # the worker died while the job ran
    again = run_try(exporter(dest, export_key="e1", runner="spark"), sleeper, store, try_number=2)
    assert len(service.requests) == 1 and again == out


def test_a_spark_export_that_failed_is_sent_again_and_fails_in_one_line(sleeper, store, service, tmp_path):
    from sleeper_ops.query.export import ExportError

    service.submit(SERVICE, {})
    service.end("job-1", "failed", {"error": "disk full"})
    store.set(SERVICE_JOB_KEY, {"service": SERVICE, "job_id": "job-1", "instance": "i1"})
    service.ends_as = ("failed", {"error": "disk full"})
    with pytest.raises(ExportError, match=r"^export of events \(export key 'e1'\) failed: disk full$"):
        run_try(exporter(str(tmp_path / "out"), export_key="e1", runner="spark"), sleeper, store, try_number=2)
    assert len(service.requests) == 2


def test_a_local_export_and_a_spark_export_without_durable_submit_nothing(sleeper, store, service, tmp_path,
                                                                          monkeypatch):
    local = run_try(exporter(str(tmp_path / "local")), sleeper, store)
    assert local["records"] == 0 and local["written"] is True
    calls: list[str] = []
    sleeper_export = type(sleeper.table("events")).export

    def in_worker(self: Any, destination: str, **kw: Any) -> Any:  # Spark's driver in the worker, as before
        calls.append(kw["runner"])
        return sleeper_export(self, destination, **{**kw, "runner": "local"})
    monkeypatch.setattr(type(sleeper.table("events")), "export", in_worker)
    run_try(exporter(str(tmp_path / "spark"), export_key="e2", runner="spark", durable=False), sleeper, store)
    assert calls == ["spark"] and service.requests == [] and SERVICE_JOB_KEY not in store


def test_the_service_runs_an_export_job_and_its_outcome_reads_back_as_the_result(sleeper, tmp_path, monkeypatch):
    from sleeper_ops.spark.service_client import export_outcome
    from sleeper_ops.spark.service_jobs import ServiceRequestError, export_on

    table_cls = type(sleeper.table("events"))
    original = table_cls.export
    monkeypatch.setattr(table_cls, "export", lambda self, d, **kw: original(self, d, **{**kw, "runner": "local"}))
    outcome = export_on(sleeper, "events", {"destination": str(tmp_path / "out"), "export_key": "e9"})
    result = export_outcome(sleeper.table("events").info, "e9", {"state": "succeeded", "outcome": outcome})
    assert (result.written, result.manifest.export_key, result.destination) == (True, "e9", str(tmp_path / "out"))
    with pytest.raises(ServiceRequestError, match="an export needs its destination and its export key"):
        export_on(sleeper, "events", {"export_key": "e9"})


def test_emr_wait_that_runs_out_cancels_the_job_run_as_the_provider_does(emr, store, monkeypatch):
    from airflow.sdk.exceptions import AirflowException

    from sleeper_ops.airflow.operators import emr as module

    cancelled: list[str] = []
    emr.cancel_job_run = lambda applicationId, jobRunId: cancelled.append(jobRunId)  # type: ignore[attr-defined]

    def runs_out(**_: Any) -> None:
        raise AirflowException("Serverless Job failed: Waiter error: max attempts reached")
    monkeypatch.setattr(module, "wait", runs_out)
    with pytest.raises(AirflowException, match="max attempts reached"):
        emr_try(emr, store)
    assert cancelled == ["run-1"]
