"""Jobs that outlive a dead worker: what the blocking bulk import and Spark compaction
operators need to follow a job on the standing Spark service through Airflow's
``ResumableJobMixin`` (:mod:`airflow.sdk`), one try of a task after another.

A blocking task that submits to the Spark service stores the job's reference
(:func:`job_ref`: the service, the job id, the service's instance) in the task state
store under :data:`SERVICE_JOB_KEY` before it waits. When its worker dies (a Celery or
LocalExecutor worker killed, the machine lost), the job keeps running on the service,
and the task's retry finds the reference and asks the service (:class:`ServiceJobs`):

* ``queued`` or ``running``: it waits for that job, submitting nothing;
* ``succeeded``: it reports that job's result at once;
* ``failed`` or ``lost`` (the service restarted or forgot the job; or a stored value
  that is not a Spark service job's reference): it submits the work again. A lost
  bulk import submitted again adds its records once (the import key); a compaction
  batch is as it was before this module (its jobs' status records decide).

The operators report an outcome exactly once per task try (the result, lineage, asset
event and ``Stats`` of the blocking path), whichever way the try got it.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Union

from sleeper_ops.spark.batch_files import SparkBatchError
from sleeper_ops.spark.service_client import (
    ACTIVE_STATES,
    LOST,
    WAIT_SECONDS,
    JobLostError,
    job_status,
    wait_for_job,
)

log = logging.getLogger(__name__)

#: the task state store key of a Spark service job (renaming it breaks the retries of tasks in flight)
SERVICE_JOB_KEY = "sleeper_spark_service_job"
#: the state of a job that ended well
SUCCEEDED = "succeeded"
#: what the service's final status (or the error that lost the job) is turned into: the task's result
Outcome = Callable[[Union[dict[str, Any], SparkBatchError]], Any]


def job_ref(service: str, job_id: str, instance: Optional[str]) -> dict[str, Any]:
    """The reference of a Spark service job as the task state store keeps it."""
    return {"service": service, "job_id": job_id, "instance": instance}


def note_nothing_to_resume(operator: Any, where: str) -> None:
    """Say, when ``operator`` is durable, that its job runs ``where`` (in the worker), so a
    retry after a dead worker runs it again: ``durable`` cannot apply there."""
    if getattr(operator, "durable", False):
        log.info("%s: durable, but the job runs %s (no Spark service): a retry after a dead worker runs it again",
                 operator.task_id, where)


def _ref_of(external_id: Any) -> Optional[dict[str, Any]]:
    if (isinstance(external_id, dict) and isinstance(external_id.get("service"), str)
            and isinstance(external_id.get("job_id"), str)):
        return external_id
    return None


class ServiceJobs:
    """The ``ResumableJobMixin`` answers of one task try about its Spark service job:
    :meth:`status`, :meth:`wait` and :meth:`result` (the last two give the task's result,
    computed once by ``outcome``). ``poll_seconds`` is the longest one status request
    waits on the service."""

    def __init__(self, outcome: Outcome, *, poll_seconds: float = WAIT_SECONDS) -> None:
        self._outcome = outcome
        self._poll = max(0.0, min(float(poll_seconds), WAIT_SECONDS))
        self._seen: dict[str, dict[str, Any]] = {}
        self._results: dict[str, Any] = {}

    def answered(self, result: Any) -> None:
        """The task's result without a job (the work was already done); the id a
        submission returns then is None, which :meth:`wait` and :meth:`result` answer
        with ``result``."""
        self._results[""] = result

    def status(self, external_id: Any) -> str:
        """The job's state now: ``queued``, ``running``, ``succeeded``, ``failed`` or
        ``lost`` (also for a stored value that is not a Spark service job's reference)."""
        ref = _ref_of(external_id)
        if ref is None:
            log.warning("the task state store holds %r, not a Spark service job: submitting afresh", external_id)
            return LOST
        doc = job_status(ref["service"], ref["job_id"], ref.get("instance"))
        self._seen[ref["job_id"]] = doc
        log.info("Spark service job %s of an earlier try is %s", ref["job_id"], doc.get("state"))
        return str(doc.get("state"))

    @staticmethod
    def is_active(status: str) -> bool:
        return status in ACTIVE_STATES

    @staticmethod
    def is_succeeded(status: str) -> bool:
        return status == SUCCEEDED

    def wait(self, external_id: Any) -> Any:
        """Wait for the job to end; the task's result (a job lost meanwhile is decided by
        ``outcome``, as on the blocking path)."""
        ref = _ref_of(external_id)
        if ref is None:
            return self._results[""]
        if ref["job_id"] not in self._results:
            ended: Union[dict[str, Any], SparkBatchError]
            try:
                ended = wait_for_job(ref["service"], ref["job_id"], ref.get("instance"), wait=self._poll)
            except SparkBatchError as e:  # JobLostError too
                ended = e
            self._results[ref["job_id"]] = self._outcome(ended)
        return self._results[ref["job_id"]]

    def result(self, external_id: Any) -> Any:
        """The task's result of a job that ended (waited for, or found succeeded by
        :meth:`status`)."""
        ref = _ref_of(external_id)
        if ref is None:
            return self._results[""]
        if ref["job_id"] not in self._results:
            doc = self._seen.pop(ref["job_id"], None) or job_status(ref["service"], ref["job_id"], ref.get("instance"))
            ended: Union[dict[str, Any], SparkBatchError] = doc
            if doc.get("state") == LOST:
                ended = JobLostError(str(doc.get("error")))
            self._results[ref["job_id"]] = self._outcome(ended)
        return self._results[ref["job_id"]]


class ServiceJobAnswers:
    """The ``ResumableJobMixin`` methods of an operator whose whole durable path is a Spark
    service job, answered by its try's :class:`ServiceJobs` (``_service_jobs``, set
    before ``execute_resumable`` runs), the job's reference kept under
    :data:`SERVICE_JOB_KEY`. Listed before ``ResumableJobMixin`` among the operator's
    bases; the operator still writes ``submit_job``."""

    external_id_key = SERVICE_JOB_KEY
    #: the running try's answers about its Spark service job (set when it runs durably)
    _service_jobs: Optional[ServiceJobs] = None

    def _jobs(self) -> ServiceJobs:
        if self._service_jobs is None:
            raise RuntimeError(f"{type(self).__name__}: no Spark service job in this try (execute_resumable "
                               "runs only on the durable service path)")
        return self._service_jobs

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return self._jobs().status(external_id)

    def is_job_active(self, status: str) -> bool:
        return ServiceJobs.is_active(status)

    def is_job_succeeded(self, status: str) -> bool:
        return ServiceJobs.is_succeeded(status)

    def poll_until_complete(self, external_id: Any, context: Any) -> Any:
        """Wait for the job; the task's result (the mixin returns it as the task's when it
        reconnected to a running job)."""
        return self._jobs().wait(external_id)

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        return self._jobs().result(external_id)
