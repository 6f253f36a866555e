"""The amazon provider's ``EmrServerlessStartJobOperator``, with the end of a failed job
reported as a failure of the job.

The provider's trigger (``EmrServerlessStartJobTrigger``, amazon provider 9.39) ends a
job that failed, was cancelled or timed out with the event ``{"status": "failure",
"message": ...}``, without the ``job_details`` that the operator's ``execute_complete``
reads on every event that is not a success: the task then fails with ``KeyError:
'job_details'`` and the job's own reason is lost. Found by running the trigger itself
against moto (``tests/integration/test_bulk_import_emr.py``).

:class:`SleeperEmrServerlessStartJobOperator` fails the task with the trigger's message
(``EMR Serverless job of application ... failed: <what EMR said>``) on any event that is not a success
and has no ``job_details``; every other event goes to the provider's own
``execute_complete``. The task fails either way and Airflow retries it: the job's
driver makes the retry safe (see :mod:`sleeper_ops.orchestration.emr`).

**Durable** (``durable=True``, the default; Airflow's ``ResumableJobMixin``): a
blocking task (``deferrable=False``, ``wait_for_completion=True``) stores the job run's
id in the task state store before it waits, so a retry after its worker died waits for
that job run (or returns its id at once when it succeeded) instead of starting another;
a job run that failed, was cancelled or is being cancelled is started again (with a
fresh client token). ``durable=False`` starts a job run on every try. A deferrable task
is as the provider runs it: the triggerer follows the job, the worker is free.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.operators.emr import EmrServerlessStartJobOperator
from airflow.providers.amazon.aws.utils.waiter_with_logging import wait
from airflow.sdk import ResumableJobMixin
from airflow.sdk.exceptions import AirflowException

#: EMR Serverless job run states of a job that may still succeed (the API's, QUEUED included)
ACTIVE_STATES = frozenset({"SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED"})
SUCCESS_STATE = "SUCCESS"


class SleeperEmrServerlessStartJobOperator(ResumableJobMixin, EmrServerlessStartJobOperator):
    """``EmrServerlessStartJobOperator`` whose deferred end fails with the job's reason,
    and whose blocking wait survives a dead worker (module docstring).

    Args:
        durable: a retry after a dead worker follows the job run of the earlier try
            (default True); the provider's arguments otherwise.
    """

    external_id_key = "emr_serverless_job_run_id"

    def execute(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Blocking: through ``ResumableJobMixin`` (the job run's id, as the provider's
        ``execute`` returns it); deferrable, or not waiting: the provider's ``execute``."""
        if event is not None or self.deferrable or not self.wait_for_completion:
            return super().execute(context, event)
        return self.execute_resumable(context)

    def submit_job(self, context: Any) -> str:
        """Start the application if it is not, and the job run (the provider's start,
        without its wait); the job run's id."""
        self.wait_for_completion = False
        try:
            job_id = super().execute(context)
        finally:
            self.wait_for_completion = True
        if not job_id:
            raise AirflowException(f"EMR Serverless application {self.application_id} gave no job run id")
        return str(job_id)

    def get_job_status(self, external_id: Any, context: Any) -> str:
        run = self.hook.conn.get_job_run(applicationId=self.application_id, jobRunId=str(external_id))
        state = str(run["jobRun"]["state"])
        self.log.info("EMR Serverless job run %s of an earlier try is %s", external_id, state)
        return state

    def is_job_active(self, status: str) -> bool:
        return status.upper() in ACTIVE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return status.upper() == SUCCESS_STATE

    def poll_until_complete(self, external_id: Any, context: Any) -> Any:
        """Wait for the job run to end as the provider's blocking path waits; raise
        AirflowException when it failed or was cancelled, or when the wait ran out (then
        the job run is cancelled, as the provider does). Its id (the
        mixin returns it as the task's result when it reconnected to a running job)."""
        self.job_id = str(external_id)
        try:
            wait(waiter=self.hook.get_waiter("serverless_job_completed"), waiter_max_attempts=self.waiter_max_attempts,
                 waiter_delay=self.waiter_delay, args={"applicationId": self.application_id, "jobRunId": self.job_id},
                 failure_message=f"EMR Serverless job run {self.job_id} of application {self.application_id} failed",
                 status_message="Serverless Job status is", status_args=["jobRun.state", "jobRun.stateDetails"])
        except AirflowException as e:
            if "Waiter error: max attempts reached" in str(e):  # as the provider does: the job run is cancelled
                self.log.info("Cancelling EMR Serverless job %s due to max waiter attempts reached", self.job_id)
                try:
                    self.hook.conn.cancel_job_run(applicationId=self.application_id, jobRunId=self.job_id)
                except Exception:
                    self.log.exception("Failed to cancel EMR Serverless job %s after waiter timeout", self.job_id)
            raise
        return self.job_id

    def get_job_result(self, external_id: Any, context: Any) -> str:
        self.job_id = str(external_id)
        return self.job_id

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        if event is not None and event.get("status") != "success" and "job_details" not in event:
            raise AirflowException(f"EMR Serverless job of application {self.application_id} failed: "
                                   f"{event.get('message', event)}")
        return super().execute_complete(context, event)
