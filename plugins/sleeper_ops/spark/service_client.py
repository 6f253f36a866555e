"""The client of the standing Spark service (:mod:`sleeper_ops.spark.service`): what the
``spark`` bulk import and compaction runners do when the configuration names a
service (``[spark] service``, or the connection extra ``spark_service``) instead of
running a spark-submit each.

Guarantees, as the spark-submit runners give them:

* A submission carries an id of the client's; a submission whose reply was lost is
  sent again under the same id, and the service runs it once.
* **A lost job is decided by the state store.** If the service restarts (its
  ``instance`` changes, or it no longer knows the job) or stays unreachable for
  :data:`LOST_AFTER_SECONDS`, the job's driver is gone: a bulk import is reported
  committed if its import key's job record is committed, else failed (importing the
  same key again adds its records once); each compaction job is reported as its
  status record says (committed, else recorded failed), as when a spark-submit dies.
* :func:`submit_job` and :func:`poll_job` are the same calls one at a time, for a
  caller that waits elsewhere (a deferred Airflow task's trigger); the outcome is then
  :func:`bulk_import_outcome` / :func:`compaction_outcome` of what the polling saw.
* A job outlives the process that submitted it: another process (a retried Airflow
  task) asks :func:`job_status` (``lost`` when the service no longer has it), waits
  with :func:`wait_for_job`, and reads the result from the ended status as above.
* A failed job raises (bulk import: :class:`~sleeper_ops.spark.batch_files.BulkImportError`)
  or comes back failed (compaction) with the service's reason.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
import uuid
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from sleeper_ops.spark.batch_files import BulkImportError, SparkBatchError, results_from_document

if TYPE_CHECKING:
    from sleeper_ops.bulk_import.job import BulkImportResult
    from sleeper_ops.compaction.execute import JobResult
    from sleeper_ops.compaction.jobs import CompactionJob
    from sleeper_ops.config import SleeperConfig
    from sleeper_ops.query.export import ExportResult
    from statestore.catalog import TableInfo

logger = logging.getLogger(__name__)

#: how long the service may stay unreachable before its jobs count as lost
LOST_AFTER_SECONDS = 60.0
#: how long one status request waits on the service for its job to end
WAIT_SECONDS = 10.0
REQUEST_TIMEOUT = 30.0
#: the states of a job that has not ended yet
ACTIVE_STATES = ("queued", "running")
#: the state :func:`job_status` answers for a job the service no longer has
LOST = "lost"


class JobLostError(SparkBatchError):
    """The service no longer has the job (it restarted) or cannot be reached."""


def _call(url: str, method: str = "GET", body: Optional[dict[str, Any]] = None,
          timeout: float = REQUEST_TIMEOUT) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON answer); OSError when the service cannot be reached."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        try:
            doc = json.loads(e.read())
        except ValueError:
            doc = {"error": f"HTTP {e.code} {e.reason}"}
        return e.code, doc


def config_document(config: SleeperConfig) -> dict[str, Any]:
    """``config`` as a job request carries it (its absolute home and its sections)."""
    return {"home": str(config.home.absolute()), **config.to_dict()}


def submit_job(service: str, request: dict[str, Any]) -> tuple[str, Optional[str]]:
    """Send ``request`` (an ``id`` is added unless it has one) without waiting for the
    job: (the job's id, the service's ``instance``). A reply lost to an unreachable
    service is sent again under the same id (the service runs it once) until
    :data:`LOST_AFTER_SECONDS` pass. Raises SparkBatchError when the service refuses
    the request or stays unreachable (then the job may or may not be queued)."""
    request = {"id": uuid.uuid4().hex, **request}
    unreachable_since: Optional[float] = None
    while True:
        try:
            code, doc = _call(f"{service}/jobs", "POST", request)
        except OSError as e:
            now = time.monotonic()
            unreachable_since = unreachable_since or now
            if now - unreachable_since > LOST_AFTER_SECONDS:
                raise SparkBatchError(f"the Spark service at {service} is unreachable ({e}); job {request['id']} "
                                      "was not submitted") from e
            time.sleep(1.0)
            continue
        if code not in (200, 202):
            raise SparkBatchError(f"the Spark service at {service} refused the job: {doc.get('error')}")
        return request["id"], doc.get("instance")


def poll_job(service: str, job_id: str, instance: Optional[str], *, wait: float = 0.0) -> Optional[dict[str, Any]]:
    """The job's final status once it ended (``state`` ``succeeded`` or ``failed``), else
    None, waiting up to ``wait`` seconds on the service for the end. Raises
    :class:`JobLostError` when the service no longer knows the job or is not the
    ``instance`` it was submitted to (it restarted), OSError when it cannot be reached,
    SparkBatchError for any other refusal."""
    code, doc = _call(f"{service}/jobs/{job_id}?wait={wait:g}", timeout=wait + REQUEST_TIMEOUT)
    if code == 404 or (instance is not None and doc.get("instance") != instance):
        raise JobLostError(f"the Spark service at {service} lost job {job_id} (it restarted)")
    if code != 200:
        raise SparkBatchError(f"the Spark service at {service} answered {code}: {doc.get('error')}")
    return doc if doc.get("state") in ("succeeded", "failed") else None


def job_status(service: str, job_id: str, instance: Optional[str] = None, *,
               unreachable_for: float = LOST_AFTER_SECONDS) -> dict[str, Any]:
    """Job ``job_id``'s status now, without waiting: the service's answer (``state``
    ``queued``, ``running``, ``succeeded`` or ``failed``; once ended, its ``outcome``,
    the job's result, and ``error``), or ``{"id", "state": "lost", "error"}`` when the
    service does not know the job, is not the ``instance`` it was submitted to (it
    restarted) or stays unreachable for ``unreachable_for`` seconds. What a retried
    task asks before it decides to wait for a job it submitted earlier, take its
    result, or submit again. Raises SparkBatchError for any other refusal."""
    unreachable_since: Optional[float] = None
    while True:
        try:
            code, doc = _call(f"{service}/jobs/{job_id}?wait=0")
        except OSError as e:
            now = time.monotonic()
            unreachable_since = unreachable_since or now
            if now - unreachable_since > unreachable_for:
                return {"id": job_id, "state": LOST, "error": f"the Spark service at {service} is unreachable ({e})"}
            time.sleep(1.0)
            continue
        if code == 404 or (instance is not None and doc.get("instance") != instance):
            return {"id": job_id, "state": LOST, "error": f"the Spark service at {service} lost job {job_id} "
                                                          "(it restarted, or forgot the job)"}
        if code != 200:
            raise SparkBatchError(f"the Spark service at {service} answered {code}: {doc.get('error')}")
        return doc


def wait_for_job(service: str, job_id: str, instance: Optional[str], *, timeout: Optional[float] = None,
                 wait: float = WAIT_SECONDS) -> dict[str, Any]:
    """Wait for job ``job_id`` (submitted earlier, by this process or another) to end;
    its final status (``state`` ``succeeded`` or ``failed``, with its ``outcome``).
    Each request waits up to ``wait`` seconds on the service. Raises
    :class:`JobLostError` (see the module docstring) or SparkBatchError when the
    service refuses, or when ``timeout`` seconds pass (the job then still runs there)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    unreachable_since: Optional[float] = None
    while True:
        try:
            doc = poll_job(service, job_id, instance, wait=wait)
            unreachable_since = None
            if doc is not None:
                return doc
        except OSError as e:
            now = time.monotonic()
            unreachable_since = unreachable_since or now
            if now - unreachable_since > LOST_AFTER_SECONDS:
                raise JobLostError(f"the Spark service at {service} is unreachable ({e}); job {job_id} "
                                   "may have run") from e
            time.sleep(1.0)
        if deadline is not None and time.monotonic() > deadline:
            raise SparkBatchError(f"job {job_id} on the Spark service at {service} did not end within "
                                  f"{timeout:g} s; it still runs there")


def run_on_service(service: str, request: dict[str, Any], *, timeout: Optional[float] = None) -> dict[str, Any]:
    """Submit ``request`` (an ``id`` is added) and wait for its end (:func:`wait_for_job`);
    the job's final status."""
    job_id, instance = submit_job(service, request)
    return wait_for_job(service, job_id, instance, timeout=timeout)


def bulk_import_request(config: SleeperConfig, table: TableInfo, sources: Sequence[str], *, import_key: str,
                        run_id: Optional[str] = None, shuffle: str = "runs",
                        ingest_job_id: Optional[str] = None) -> dict[str, Any]:
    """The service's job request for one bulk import."""
    return {"kind": "bulk_import", "table": table.name, "config": config_document(config), "sources": list(sources),
            "import_key": import_key, "run_id": run_id, "shuffle": shuffle, "ingest_job_id": ingest_job_id}


def bulk_import_outcome(config: SleeperConfig, table: TableInfo, import_key: str,
                        ended: Union[dict[str, Any], JobLostError, SparkBatchError]) -> BulkImportResult:
    """The result of a bulk import the service ran: ``ended`` is its final status, or
    the error that lost it; a lost job is decided by ``config``'s state store (its
    import key's job committed, else failed).

    Raises:
        BulkImportError: the import failed or was lost uncommitted (the reason says which).
    """
    from sleeper_ops.bulk_import.job import BulkImportResult, import_job_id

    what = f"bulk import into {table.name} (import key {import_key!r}, job {import_job_id(table, import_key)})"
    if isinstance(ended, JobLostError):
        from sleeper_ops.api import Sleeper

        with Sleeper(config=config) as sleeper:
            rec = sleeper.state_store.get_job(table.table_id, import_job_id(table, import_key))
        if rec is not None and rec.status == "committed":
            logger.warning("%s: %s, but its commit had landed", what, ended)
            return BulkImportResult(table.name, import_key, rec.job_id, "committed", records=rec.rows_written,
                                    files_written=list(rec.outputs or ()))
        raise BulkImportError(f"{what} failed: {ended}; not committed when checked (importing the same key again "
                              "adds its records once)") from ended
    if isinstance(ended, SparkBatchError):
        raise BulkImportError(f"{what} failed: {ended}") from ended
    outcome = ended.get("outcome") or {}
    if ended["state"] != "succeeded" or outcome.get("result") is None:
        raise BulkImportError(f"{what} failed: {ended.get('error') or outcome.get('error')}")
    return BulkImportResult(**outcome["result"])


def submit_bulk_import(config: SleeperConfig, table: TableInfo, sources: Sequence[str], *,
                       import_key: str, run_id: Optional[str] = None, shuffle: str = "runs",
                       ingest_job_id: Optional[str] = None, timeout: Optional[float] = None) -> BulkImportResult:
    """One bulk import on ``config.spark_service``; its result (when the job is lost,
    ``config``'s state store says whether it committed: :func:`bulk_import_outcome`).

    Raises:
        BulkImportError: the import failed or was lost uncommitted (the reason says which).
    """
    assert config.spark_service is not None
    started = time.perf_counter()
    request = bulk_import_request(config, table, sources, import_key=import_key, run_id=run_id, shuffle=shuffle,
                                  ingest_job_id=ingest_job_id)
    ended: Union[dict[str, Any], SparkBatchError]
    try:
        ended = run_on_service(config.spark_service, request, timeout=timeout)
    except SparkBatchError as e:  # JobLostError too
        ended = e
    result = bulk_import_outcome(config, table, import_key, ended)
    logger.info("%s (%.1f s including the service's queue)", result.summary(), time.perf_counter() - started)
    return result


def compaction_request(config: SleeperConfig, table: TableInfo, jobs: Sequence[CompactionJob], *,
                       run_id: Optional[str] = None) -> dict[str, Any]:
    """The service's job request for a batch of ``table``'s compaction jobs."""
    return {"kind": "compaction", "table": table.name, "config": config_document(config),
            "jobs": [j.to_dict() for j in jobs], "run_id": run_id}


def compaction_outcome(config: SleeperConfig, jobs: Sequence[CompactionJob],
                       ended: Union[dict[str, Any], SparkBatchError]) -> tuple[dict[str, JobResult], str]:
    """The results the service reported for ``jobs``, by job id, and the reason to
    record for any job it did not report (``ended``: the batch's final status, or the
    error that lost it)."""
    if isinstance(ended, SparkBatchError):
        return {}, str(ended)
    outcome = ended.get("outcome")
    results = results_from_document(outcome, jobs, f"the Spark service at {config.spark_service}") \
        if outcome is not None else {}
    return results, f"the Spark service failed the batch: {ended.get('error')}"


def compaction_results(config: SleeperConfig, table: TableInfo, jobs: Sequence[CompactionJob], *,
                       run_id: Optional[str] = None,
                       timeout: Optional[float] = None) -> tuple[dict[str, JobResult], str]:
    """Run ``jobs`` (already assigned) on ``config.spark_service``: the results the
    service reported, by job id, and the reason to record for any job it did not
    report (:func:`sleeper_ops.spark.submit.submit_compaction_batch` records those as
    their status records say)."""
    assert config.spark_service is not None
    ended: Union[dict[str, Any], SparkBatchError]
    try:
        ended = run_on_service(config.spark_service, compaction_request(config, table, jobs, run_id=run_id),
                               timeout=timeout)
    except SparkBatchError as e:
        ended = e
    return compaction_outcome(config, jobs, ended)


def export_request(config: SleeperConfig, table: TableInfo, destination: str, *, export_key: str,
                   where: Optional[str] = None, run_id: Optional[str] = None) -> dict[str, Any]:
    """The service's job request for one export of ``table`` to ``destination`` (an
    absolute directory or an ``s3://`` prefix: the service resolves nothing against
    the caller's working directory)."""
    return {"kind": "export", "table": table.name, "config": config_document(config), "destination": destination,
            "export_key": export_key, "where": where, "run_id": run_id}


def export_outcome(table: TableInfo, export_key: str, ended: Union[dict[str, Any], SparkBatchError]) -> ExportResult:
    """The result of an export the service ran (``ended``: its final status, or the
    error that lost it).

    Raises:
        ExportError: the export failed or was lost (the reason says which; exporting
            again under the same key writes it once, or answers "already exported").
    """
    from sleeper_ops.io.export_manifest import ExportManifest
    from sleeper_ops.query.export import ExportError, ExportResult

    what = f"export of {table.name} (export key {export_key!r})"
    if isinstance(ended, SparkBatchError):
        raise ExportError(f"{what} failed: {ended}") from ended
    outcome = ended.get("outcome") or {}
    done = outcome.get("result")
    if ended["state"] != "succeeded" or done is None:
        raise ExportError(f"{what} failed: {ended.get('error') or outcome.get('error')}")
    return ExportResult(done["destination"], ExportManifest.from_dict(done["manifest"]), bool(done["written"]))
