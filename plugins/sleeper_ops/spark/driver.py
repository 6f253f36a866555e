"""The Spark driver of a compaction batch: mark jobs started, run them, commit, report.

:func:`main` is what ``spark_apps/compaction.py`` calls under spark-submit, whether
submitted by :mod:`sleeper_ops.spark.submit` or by Airflow's SparkSubmitOperator after
a separate job-creation task. It opens the configuration from ``--config-file`` (a file
written by :func:`~sleeper_ops.spark.batch_files.write_config_file`) or ``--home`` (its
``sleeper.toml``), reads the jobs file (or creates the table's jobs now), runs the batch
(:func:`run_compaction_batch`: one job a Spark task, the executor side in
:mod:`sleeper_ops.spark.executor`) and writes the results file.

Guarantees: every job is recorded started, naming its output key, before it runs, and
beats (:mod:`sleeper_ops.heartbeat`) while the batch runs, queued or running (so the
orphan sweep keeps the output however long the batch takes), and ends recorded
committed, refused or failed. Each job is its own Spark job, submitted from a pool of
driver threads as wide as the cluster, and is committed by this driver with
:func:`~sleeper_ops.compaction.execute.record_commit` (the usual atomic replace of
references) as soon as its task finishes, not after the whole batch; the state store
is never touched from the executors. Spark may run a job's task more than once
(speculation, a lost executor): each attempt writes a key of its own
(:mod:`sleeper_ops.spark.attempts`), the output committed is the one of the attempt
whose result reached the driver, and once every attempt has ended the others'
outputs are deleted (what a process outliving its executor writes later is the
orphan sweep's). A job that fails in its task, or whose Spark
job fails, is recorded failed with the reason. This is the only module of the adapter that imports
pyspark, and only inside :func:`main`.
"""

from __future__ import annotations

import argparse
import functools
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from sleeper_ops.compaction.execute import JobOutput, JobResult, record_commit, start_attempt
from sleeper_ops.heartbeat import Heartbeat
from sleeper_ops.io.attempts import attempt_objects
from sleeper_ops.io.datafile import WrittenFile, sketch_key
from sleeper_ops.spark.attempts import wait_for_attempts
from sleeper_ops.spark.batch_files import SparkBatchError, read_config_file, read_jobs_file, write_results_file
from sleeper_ops.spark.executor import run_tasks, task_context
from statestore.errors import SleeperError
from statestore.jobs import JobRecord

if TYPE_CHECKING:
    from sleeper_ops.compaction.jobs import CompactionJob
    from sleeper_ops.io.storage import ObjectStore
    from statestore.catalog import TableInfo
    from statestore.roles import JobTracker
    from statestore.store import StateStore

logger = logging.getLogger(__name__)

#: How much of a Spark job's failure the reason recorded for its jobs quotes.
ERROR_CHARS = 2000


@dataclass
class BatchOutcome:
    """What :func:`run_compaction_batch` did: a result per job; ``error`` when the Spark
    job itself failed (every job it did not finish is then failed with that reason)."""

    results: list[JobResult] = field(default_factory=list)
    error: Optional[str] = None


def _commit_task_result(state_store: StateStore, objects: ObjectStore, rec: JobRecord, job: CompactionJob,
                        r: Mapping[str, Any]) -> JobResult:
    """Record what a task reported for ``job`` (a result of
    :func:`~sleeper_ops.spark.executor.run_tasks`): its failure, or its commit. Never raises."""
    try:
        if r["error"] is not None:
            reason = f"{r['error']} (on {r['worker']})"
            state_store.put_job(rec.failed(reason))
            return JobResult(job, "failed", seconds=r["seconds"], reason=reason)
        # The commit needs only the key and the count; the sketches stay in their sidecar.
        written = None
        if r["output"] is not None:
            written = WrittenFile(r["output"], r["record_count"], None)  # type: ignore[arg-type]
        out = JobOutput(job, written, r["rows_read"], r["rows_written"], r["seconds"])
        return record_commit(state_store, objects, rec, out)
    except Exception as e:
        return JobResult(job, "failed", seconds=r.get("seconds", 0.0), reason=f"{type(e).__name__}: {e}")


def run_compaction_batch(spark_context: Any, state_store: StateStore, objects: ObjectStore, table: TableInfo,
                         jobs: Sequence[CompactionJob], *, run_id: Optional[str] = None,
                         parallel: Optional[int] = None, python_modules: Sequence[str] = ()) -> BatchOutcome:
    """Run ``jobs`` on ``spark_context``, one Spark job each, and commit each as it ends.

    Each job is recorded started first, naming its output; the biggest jobs are
    submitted first, ``parallel`` at a time (default the context's default
    parallelism). A job whose partition no longer exists (and that is not of whole
    files) is failed without running. Results come back in the order of ``jobs``.
    ``python_modules`` (the configuration's ``iterators.python_modules``) goes to the
    executors: where the table's Python iterator may come from.
    """
    outcome = BatchOutcome()
    if not jobs:
        return outcome
    regions = {p.id: p.region for p in state_store.partitions(table.table_id)}
    records: dict[str, JobRecord] = {}
    results: dict[str, JobResult] = {}
    items: list[dict[str, Any]] = []
    for job in sorted(jobs, key=lambda j: -j.input_records):
        rec = start_attempt(state_store, table, job, run_id)
        records[job.job_id] = rec
        region = regions.get(job.partition_id)
        if region is None and not job.whole_files:
            reason = f"partition {job.partition_id} does not exist"
            state_store.put_job(rec.failed(reason))
            results[job.job_id] = JobResult(job, "failed", reason=reason)
            continue
        items.append({"job": job.to_dict(), "region": region.to_dict() if region is not None else None,
                      "output_key": rec.outputs[0]})
    by_id = {j.job_id: j for j in jobs}
    if items:
        fn = functools.partial(run_tasks, task_context(objects, table, python_modules))

        def run_one(item: dict[str, Any]) -> tuple[JobResult, Optional[str]]:
            job_id = item["job"]["job_id"]
            return _run_job(spark_context, state_store, objects, fn, item, records[job_id], by_id[job_id],
                            f"sleeper compaction of {table.name}: job {job_id}")

        width = max(1, min(len(items), parallel or int(getattr(spark_context, "defaultParallelism", 1) or 1)))
        # every job of the batch beats while the batch runs, the queued ones too (sleeper_ops.heartbeat)
        with Heartbeat(state_store, table, [it["job"]["job_id"] for it in items]), \
                ThreadPoolExecutor(width, thread_name_prefix="sleeper-spark-job") as pool:
            for f in as_completed([pool.submit(run_one, it) for it in items]):
                result, error = f.result()
                results[result.job.job_id] = result
                outcome.error = outcome.error or error
                _log_result(result)
    outcome.results = [results[j.job_id] for j in jobs]
    return outcome


def check_jobs_of(table: TableInfo, jobs: Sequence[CompactionJob]) -> None:
    """Raise SparkBatchError unless every job of ``jobs`` is a job of ``table``."""
    wrong = [j.job_id for j in jobs if j.table_id != table.table_id]
    if wrong:
        raise SparkBatchError(f"jobs {', '.join(wrong[:5])} are not jobs of table {table.name} ({table.table_id})")


def _run_job(spark_context: Any, state_store: StateStore, objects: ObjectStore, fn: Any, item: dict[str, Any],
             rec: JobRecord, job: CompactionJob, description: str) -> tuple[JobResult, Optional[str]]:
    """Run one job as its own Spark job (job group), commit the output of the attempt
    whose result reached this driver, wait until every other attempt of the task has
    ended, then delete what those wrote. Returns the result and, when the Spark job
    itself failed, why. Never raises."""
    group = f"sleeper-compaction-{job.job_id}-{uuid.uuid4().hex[:8]}"
    spark_context.setJobGroup(group, description)
    winner: Optional[str] = None
    submitted = 0
    try:
        try:
            got: list[dict[str, Any]] = spark_context.parallelize([item], numSlices=1).mapPartitions(fn).collect()
        except Exception as e:
            reason = f"Spark job failed: {type(e).__name__}: {str(e)[:ERROR_CHARS]}"
            logger.error("job %s: %s", job.job_id, reason)
            _fail_quietly(state_store, rec, reason)
            return JobResult(job, "failed", reason=reason), reason
        submitted = 1
        winner = got[0].get("output")
        return _commit_task_result(state_store, objects, rec, job, got[0]), None
    finally:
        try:
            wait_for_attempts(spark_context, group, jobs=submitted)
        except Exception as e:  # Spark's status is unavailable: the losers' keys are still their own
            logger.warning("job %s: cannot follow its Spark attempts: %s", job.job_id, e)
        _delete_losers(objects, item["output_key"], winner)


def _delete_losers(objects: ObjectStore, named: str, winner: Optional[str]) -> None:
    """Delete what the attempts of a job's task other than the winner's wrote for the
    ``named`` key (never committed: the driver commits the winner's key only). Never raises."""
    keep = {winner, sketch_key(winner)} if winner is not None else set()
    try:
        losers = [k for k in attempt_objects(objects, [named]) if k not in keep]
        for k in losers:
            objects.delete(k)
    except Exception as e:  # what is left is the orphan sweep's
        logger.warning("could not delete the outputs of the losing attempts of %s: %s", named, e)
        return
    if losers:
        logger.info("deleted %d objects written by losing attempts for %s", len(losers), named)


def _fail_quietly(state_store: JobTracker, rec: JobRecord, reason: str) -> None:
    try:
        state_store.put_job(rec.failed(reason))
    except Exception:  # the failure is reported in the results either way
        logger.exception("could not record job %s failed", rec.job_id)


def _log_result(result: JobResult) -> None:
    job = result.job
    logger.info("job %s (partition %s, %d files): %s%s", job.job_id, job.partition_id, len(job.inputs),
                result.status, f": {result.reason}" if result.reason else f", {result.rows_written:,} rows")


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="spark_apps/compaction.py",
                                description="Run a batch of a Sleeper table's compaction jobs on Spark.")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--home", default=None, help="SLEEPER_HOME (default: $SLEEPER_HOME or ./.sleeper)")
    where.add_argument("--config-file", default=None,
                       help="the configuration (written by write_config_file), instead of HOME/sleeper.toml")
    p.add_argument("--table", required=True, help="the table's name")
    p.add_argument("--jobs-file", default=None,
                   help="jobs to run (written by write_jobs_file); default: create the table's jobs now")
    p.add_argument("--results-file", default=None, help="where to write what became of each job")
    p.add_argument("--run-id", default=None, help="the run recorded in the jobs' status records")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run a batch, commit, report (the arguments: ``--help``).

    Exits 0 when the batch ran, even if some jobs failed (their failures are in the
    results file and the status records); 1 when the batch itself could not run (bad
    configuration, unknown table, a jobs file of another table) or Spark failed.
    """
    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    from sleeper_ops.api import Sleeper
    from sleeper_ops.compaction.jobs import create_compaction_jobs

    try:
        config = read_config_file(args.config_file) if args.config_file is not None else None
    except SleeperError as e:
        logger.error("%s", e)
        return 1
    with (Sleeper(config=config) if config is not None else Sleeper(home=args.home)) as sleeper:
        s3 = sleeper.s3
        try:
            table = sleeper.state_store.get_table(args.table)
            if args.jobs_file is not None:
                batch = read_jobs_file(args.jobs_file, s3)
                run_id = args.run_id or batch.run_id
                jobs = list(batch.jobs)
                check_jobs_of(table, jobs)
            else:
                run_id = args.run_id
                jobs = create_compaction_jobs(sleeper.state_store, table, run_id=run_id, objects=sleeper.objects).jobs
        except SleeperError as e:
            logger.error("%s", e)
            return 1
        logger.info("%s: %d compaction jobs", table.name, len(jobs))
        if not jobs:
            outcome = BatchOutcome()
        else:
            spark = SparkSession.builder.appName(f"sleeper-compaction-{table.name}").getOrCreate()
            try:
                outcome = run_compaction_batch(spark.sparkContext, sleeper.state_store, sleeper.objects, table, jobs,
                                               run_id=run_id, python_modules=sleeper.python_iterator_modules)
            finally:
                spark.stop()
        if args.results_file is not None:
            write_results_file(args.results_file, outcome.results, s3=s3, error=outcome.error)
    return 1 if outcome.error else 0
