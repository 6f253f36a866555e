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
"""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.operators.emr import EmrServerlessStartJobOperator
from airflow.sdk.exceptions import AirflowException


class SleeperEmrServerlessStartJobOperator(EmrServerlessStartJobOperator):
    """``EmrServerlessStartJobOperator`` whose deferred end fails with the job's reason."""

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        if event is not None and event.get("status") != "success" and "job_details" not in event:
            raise AirflowException(f"EMR Serverless job of application {self.application_id} failed: "
                                   f"{event.get('message', event)}")
        return super().execute_complete(context, event)
