"""The compaction operators: in one task (:class:`SleeperCompactionOperator`), or across
tasks as the generated DAG runs it (``create_jobs`` -> ``run_local`` | ``run_spark`` ->
``report``; the Spark batch's operator is :mod:`sleeper_ops.airflow.operators.spark_compaction`).

    from sleeper_ops.airflow.operators.compaction import SleeperCompactionOperator
    compact = SleeperCompactionOperator(task_id="compact", table="events")

Every operator opens Sleeper through :class:`~sleeper_ops.airflow.hooks.sleeper.SleeperHook`
(``sleeper_conn_id``, default ``sleeper_default``; ``SLEEPER_HOME`` when that default connection
does not exist, any other missing id fails) and calls :mod:`sleeper_ops.airflow.task_runner`, which holds the behaviour:
maintenance takes the table's lease for its operation (one run per table and
operation at a time, across DAGs, backfills and the CLI; a task finding it held is
skipped and names the holder), offline tables are skipped by split, compaction, GC and flush,
and a run with failed jobs fails its task. ``table`` is templated everywhere.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from airflow.providers.standard.operators.branch import BaseBranchOperator

from sleeper_ops.airflow import task_runner
from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.airflow.operators.base import SleeperOperator, SleeperOperatorMixin
from sleeper_ops.airflow.operators.spark_deferral import JOBS_FROM_CREATE_JOBS
from sleeper_ops.airflow.utils.openlineage import compaction_lineage, jobs_lineage


class SleeperCompactionOperator(SleeperOperator):
    """Compaction in one task: under the table's compaction lease, create and assign
    jobs, run them with ``runner`` (``local`` in this worker, ``spark`` with one
    spark-submit for the batch), commit each, release the lease. Fails if any job failed
    (its inputs stay assigned; a later run retries it).

    Args:
        runner: ``local`` or ``spark`` (templated); default the table's
            ``sleeper.table.compaction.runner``.
    """

    template_fields: Sequence[str] = ("table", "runner")

    def __init__(self, *, runner: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runner = runner

    def execute(self, context: Any) -> str:
        runner = self.runner or None
        work = self.traced(lambda t, run: t.compact(runner=runner, run_id=run), compaction_lineage)
        return task_runner.run_exclusive("compaction", self.table, context, work,
                                         failures=lambda report: report.count("failed"), opener=self.hook.get_conn)


# ----- compaction across tasks: create_jobs -> run_local | run_spark -> report ----------------
class SleeperCreateCompactionJobsOperator(SleeperOperatorMixin, BaseBranchOperator):
    """Take the run's compaction lease (held until the report task releases it), create
    and assign jobs, push them to XCom ``jobs`` as a JSON array, and branch to
    ``run_local`` or ``run_spark`` by ``runner`` (templated; default the table's), or to
    nothing when there are no jobs."""

    template_fields: Sequence[str] = ("table", "runner")
    ui_color = "#dbeafe"

    def __init__(self, *, table: str, runner: Optional[str] = None,
                 sleeper_conn_id: str = SleeperHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.runner = runner
        self.sleeper_conn_id = sleeper_conn_id

    def choose_branch(self, context: Any) -> Any:
        return task_runner.create_compaction_jobs(self.table, self.runner or None, context, opener=self.hook.get_conn)


class SleeperRunCompactionJobsOperator(SleeperOperator):
    """Run given compaction jobs in this worker under the run's compaction lease.

    Args:
        jobs: a JSON array of jobs (templated; :data:`JOBS_FROM_CREATE_JOBS` after a
            :class:`SleeperCreateCompactionJobsOperator` called ``create_jobs``).
    """

    template_fields: Sequence[str] = ("table", "jobs")

    def __init__(self, *, jobs: Union[str, Sequence[Any]] = JOBS_FROM_CREATE_JOBS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.jobs = jobs

    def execute(self, context: Any) -> str:
        jobs = task_runner.jobs_from_json(self.jobs)
        try:
            return task_runner.run_compaction_jobs(self.table, jobs, context, opener=self.hook.get_conn)
        finally:
            if jobs:
                with self.hook.get_conn() as sleeper:
                    self.lineage = jobs_lineage(sleeper, self.table, jobs)


class SleeperCompactionReportOperator(SleeperRunCompactionJobsOperator):
    """Release the run's compaction lease and log what its jobs did (a teardown task)."""

    def execute(self, context: Any) -> str:
        return task_runner.report_compaction(self.table, task_runner.jobs_from_json(self.jobs), context,
                                             opener=self.hook.get_conn)
