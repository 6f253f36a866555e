"""The dated bulk import task of a table on EMR Serverless: the amazon provider's
``EmrServerlessStartJobOperator`` (as :mod:`sleeper_ops.airflow.operators.emr`, which
reports a failed job's reason), deferrable, sending
:func:`sleeper_ops.spark.emr_serverless.job_request`.

The task starts the job (and the application when it is stopped), then defers to the
triggerer until the job ends: it succeeds when the job succeeded and fails when it
failed, was cancelled or timed out, and Airflow retries it. Exactly-once is the job's
own: its driver commits through the state store under the same import key as the Spark
path (the table id and the run's data interval start), so a retried job of a date whose
first attempt committed finds it committed and adds nothing, and a job that failed
committed nothing (:mod:`sleeper_ops.bulk_import.job`).

Each task try sends a fresh client token: EMR answers a repeated token with the job it
already started, so a retry after a failed job would otherwise only watch that one fail
again.

AWS credentials, region and endpoint come from the Airflow connection ``aws_default``
(the provider's ``AwsBaseHook``). The provider's trigger needs ``aiobotocore`` in the
triggerer's environment (see docs/deploy.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sleeper_ops.airflow.assets.sleeper import table_asset
from sleeper_ops.spark.emr_serverless import job_request

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from statestore.catalog import TableInfo

#: the Airflow connection of AWS credentials, region and endpoint
AWS_CONN_ID = "aws_default"
#: how often the triggerer polls the job, and for how long (2 hours)
WAITER_DELAY_SECONDS = 30
WAITER_MAX_ATTEMPTS = 240
#: the templated run id the driver records in the job's record
RUN_ID_TEMPLATE = "{{ dag.dag_id }}/{{ run_id }}"


def emr_bulk_import_task(dag: DAG, table: TableInfo, *, sources: str, import_key: str, **kwargs: Any) -> Any:
    """Add ``table``'s bulk import task (``bulk_import``) to ``dag``: an
    ``EmrServerlessStartJobOperator`` (``deferrable=True``) of the job that imports
    ``sources`` (templated) under ``import_key`` (templated). It updates the table's
    asset when it succeeds."""
    from sleeper_ops.airflow.operators.emr import SleeperEmrServerlessStartJobOperator

    request = job_request(table, sources=sources, import_key=import_key, run_id=RUN_ID_TEMPLATE)
    return SleeperEmrServerlessStartJobOperator(
        task_id="bulk_import", dag=dag, application_id=request.application_id,
        execution_role_arn=request.execution_role_arn, job_driver=request.job_driver,
        configuration_overrides=request.configuration_overrides or None, name=request.name,
        deferrable=True, wait_for_completion=True, waiter_delay=WAITER_DELAY_SECONDS,
        waiter_max_attempts=WAITER_MAX_ATTEMPTS, aws_conn_id=AWS_CONN_ID, outlets=[table_asset(table.name)],
        **kwargs)
