"""What the Spark operators share (:mod:`sleeper_ops.airflow.operators.bulk_import`,
:mod:`sleeper_ops.airflow.operators.spark_compaction`): whether a task defers on the
standing Spark service, and the compaction operators' default ``jobs``."""

from __future__ import annotations

import logging
from typing import Any, Optional

log = logging.getLogger(__name__)

#: ``jobs`` argument of the compaction operators after ``create_jobs`` in the same DAG.
JOBS_FROM_CREATE_JOBS = "{{ ti.xcom_pull(task_ids='create_jobs', key='jobs') }}"


def service_for_deferral(operator: Any, config: Any) -> Optional[str]:
    """The Spark service ``operator`` defers on, or None (blocking), with a line saying why
    a deferrable task runs blocking."""
    if not operator.deferrable:
        return None
    if config.spark_service is None:
        log.warning("%s: deferrable, but the connection names no Spark service (extra spark_service); running "
                    "spark-submit in this worker", operator.task_id)
    return config.spark_service
