"""Compaction runner ``spark``, the submitter: a batch of jobs in one spark-submit.

Runs in the process that created the jobs (the CLI, the Python API, an Airflow task).
:func:`submit_compaction_batch` writes the batch to a jobs file and the configuration
to a configuration file (:mod:`sleeper_ops.spark.batch_files`), runs ``spark-submit
spark_apps/compaction.py`` (:func:`spark_submit_command`; the driver is
:mod:`sleeper_ops.spark.driver`), streams Spark's log to this module's logger and reads
the results file back. Spark is never on the per-job path: its start-up (10-20 s) is
paid once a batch. :func:`batch_runner` is what the core's runner registry
(:data:`sleeper_ops.compaction.runners.BATCH_RUNNERS`) loads by name.

Guarantees: every job of the batch comes back as exactly one
:class:`~sleeper_ops.compaction.execute.JobResult`, committed, refused or failed, and
:func:`submit_compaction_batch` never raises for a job or batch failure: a job that
fails in its task is recorded failed with the error; if spark-submit itself fails (or
is killed at its timeout), every job it did not report is recorded failed with the
tail of its log, and a job the driver had already committed keeps its committed
record. Commits are the usual atomic replace of references, so a failed or repeated
batch never loses or duplicates records; outputs of a batch that died before
committing are orphans for garbage collection.
"""

from __future__ import annotations

import collections
import importlib.resources
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from sleeper_ops.compaction.execute import JobResult
from sleeper_ops.errors import ConfigError
from sleeper_ops.spark.batch_files import SparkBatchError, read_results_file, write_config_file, write_jobs_file
from statestore.jobs import JobRecord

if TYPE_CHECKING:
    from sleeper_ops.compaction.jobs import CompactionJob
    from sleeper_ops.compaction.runners import BatchRunner
    from sleeper_ops.config import SleeperConfig
    from statestore.catalog import TableInfo
    from statestore.roles import JobTracker
    from statestore.store import StateStore

logger = logging.getLogger(__name__)

APP_NAME = "compaction.py"
#: Spark settings every submission gets unless overridden (``local`` masters also get
#: ``spark.driver.host=127.0.0.1``).
DEFAULT_SPARK_CONF: dict[str, str] = {"spark.ui.enabled": "false", "spark.log.level": "WARN"}
#: How much of spark-submit's log a failed job's reason quotes.
LOG_TAIL_LINES = 15
LOG_TAIL_CHARS = 2000


def spark_app_path(name: str = APP_NAME) -> Path:
    """``spark_apps/<name>`` (default the compaction app): in the checkout, or in the
    installed package ``sleeper_ops.spark.apps`` (a real file either way, as
    spark-submit needs)."""
    path = Path(str(importlib.resources.files("sleeper_ops.spark.apps"))) / name
    if not path.is_file():
        raise ConfigError(f"the Spark application {path} is missing (a broken install: reinstall the package)")
    return path


def find_spark_submit() -> str:
    """``spark-submit`` next to this Python (pyspark's, in a venv), else on PATH."""
    local = Path(sys.executable).parent / "spark-submit"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("spark-submit")
    if found is None:
        raise ConfigError("spark-submit not found next to this Python nor on PATH (pip install pyspark)")
    return found


def spark_conf(master: str, conf: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """:data:`DEFAULT_SPARK_CONF` (plus the loopback driver host for ``local`` masters),
    overridden by ``conf``."""
    out = dict(DEFAULT_SPARK_CONF)
    if master.startswith("local"):
        out["spark.driver.host"] = "127.0.0.1"
    out.update(conf or {})
    return out


def app_arguments(config: SleeperConfig, table: str, *, jobs_file: Optional[str] = None,
                  results_file: Optional[str] = None, run_id: Optional[str] = None,
                  config_file: Optional[str] = None) -> list[str]:
    """The arguments of ``spark_apps/compaction.py`` (see :func:`sleeper_ops.spark.driver.main`).

    The driver opens ``config_file`` (written by
    :func:`~sleeper_ops.spark.batch_files.write_config_file`) when given, else
    ``config.home``'s ``sleeper.toml``.
    """
    args = ["--config-file", config_file] if config_file is not None else ["--home", str(config.home)]
    args += ["--table", table]
    for flag, value in (("--jobs-file", jobs_file), ("--results-file", results_file), ("--run-id", run_id)):
        if value is not None:
            args += [flag, value]
    return args


def spark_submit_command(config: SleeperConfig, table: str, *, jobs_file: Optional[str] = None,
                         results_file: Optional[str] = None, run_id: Optional[str] = None,
                         config_file: Optional[str] = None, spark_submit: Optional[str] = None,
                         conf: Optional[Mapping[str, str]] = None) -> list[str]:
    """The spark-submit command line running a batch of ``table``'s compaction on
    ``config.spark_master`` (arguments of the application: :func:`app_arguments`)."""
    cmd = [spark_submit or find_spark_submit(), "--master", config.spark_master,
           "--name", f"sleeper-compaction-{table}"]
    for k, v in spark_conf(config.spark_master, conf).items():
        cmd += ["--conf", f"{k}={v}"]
    return [*cmd, str(spark_app_path()), *app_arguments(config, table, jobs_file=jobs_file, results_file=results_file,
                                                        run_id=run_id, config_file=config_file)]


def spark_environment(master: str, base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The environment for spark-submit: this Python for the driver and the workers
    (unless ``PYSPARK_PYTHON`` is set), the loopback address for ``local`` masters."""
    env = dict(os.environ if base is None else base)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
    if master.startswith("local"):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def _stream(pipe: Any, level: int, tail: Optional[collections.deque[str]]) -> None:
    for raw in iter(pipe.readline, b""):
        line = raw.decode(errors="replace").rstrip()
        if not line:
            continue
        logger.log(level, "spark-submit: %s", line)
        if tail is not None:
            tail.append(line)
    pipe.close()


def run_spark_submit(cmd: list[str], env: Mapping[str, str], timeout: Optional[float]) -> tuple[int, str]:
    """Run ``cmd``, logging its output as it comes; returns (exit code, tail of stderr).
    Past ``timeout`` seconds its whole process group is killed."""
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
    logger.info("running %s", " ".join(cmd))
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env),
                                start_new_session=True)
    except OSError as e:
        return -1, f"cannot run {cmd[0]}: {e}"
    readers = [threading.Thread(target=_stream, args=(proc.stdout, logging.INFO, None), daemon=True),
               threading.Thread(target=_stream, args=(proc.stderr, logging.INFO, tail), daemon=True)]
    for t in readers:
        t.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        tail.append(f"spark-submit killed after {timeout} s")
        code = -9
    for t in readers:
        t.join(timeout=10)
    return code, "\n".join(tail)[-LOG_TAIL_CHARS:]


def unreported_result(state_store: JobTracker, table: TableInfo, job: CompactionJob, reason: str) -> JobResult:
    """The result of a job the Spark driver did not report: committed if its status
    record says so, else recorded failed with ``reason``."""
    try:
        rec = state_store.get_job(table.table_id, job.job_id)
        if rec is not None and rec.status == "committed":
            return JobResult(job, "committed", rec.rows_read, rec.rows_written, rec.duration_s or 0.0, rec.output)
        rec = rec or JobRecord.created(table.table_id, job.job_id, "compaction", partition_id=job.partition_id,
                                       input_files=len(job.inputs))
        state_store.put_job(rec.failed(reason))
    except Exception as e:
        logger.warning("could not record job %s failed: %s", job.job_id, e)
    return JobResult(job, "failed", reason=reason)


def submit_compaction_batch(config: SleeperConfig, state_store: StateStore, table: TableInfo,
                            jobs: Sequence[CompactionJob], *, run_id: Optional[str] = None,
                            spark_submit: Optional[str] = None, conf: Optional[Mapping[str, str]] = None,
                            timeout: Optional[float] = None) -> list[JobResult]:
    """Run ``jobs`` (already assigned) in one spark-submit; one result per job, in order.

    The Spark driver opens ``config`` from a file written next to the jobs file (in a
    private temporary directory, removed afterwards) and commits each job;
    ``state_store`` is used here only to record jobs the driver did not report (see the
    module docstring). ``spark_submit`` overrides the executable, ``conf`` adds Spark
    settings, ``timeout`` (seconds) kills a batch that runs too long. When
    ``config.spark_service`` is set, the batch goes to that standing service instead
    (:mod:`sleeper_ops.spark.service_client`; ``spark_submit`` and ``conf`` unused).
    """
    if not jobs:
        return []
    jobs = list(jobs)
    if config.spark_service is not None:  # a standing driver: no spark-submit
        from sleeper_ops.spark.service_client import compaction_results

        reported, why = compaction_results(config, table, jobs, run_id=run_id, timeout=timeout)
        return [reported.get(j.job_id) or unreported_result(state_store, table, j, why) for j in jobs]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sleeper-spark-compaction-") as tmp:
        jobs_file, results_file = os.path.join(tmp, "jobs.json"), os.path.join(tmp, "results.json")
        config_file = os.path.join(tmp, "sleeper.toml")
        write_jobs_file(jobs_file, table.name, jobs, table_id=table.table_id, run_id=run_id)
        write_config_file(config_file, config)
        try:
            cmd = spark_submit_command(config, table.name, jobs_file=jobs_file, results_file=results_file,
                                       run_id=run_id, config_file=config_file, spark_submit=spark_submit, conf=conf)
        except ConfigError as e:
            code, tail = -1, str(e)
        else:
            code, tail = run_spark_submit(cmd, spark_environment(config.spark_master), timeout)
        results: dict[str, JobResult] = {}
        reason = f"spark-submit exited with code {code}: {tail}" if code else "spark-submit reported no result"
        if os.path.exists(results_file):
            try:
                results = read_results_file(results_file, jobs)
            except SparkBatchError as e:
                reason = f"{reason}; {e}"
    out = [results.get(j.job_id) or unreported_result(state_store, table, j, reason) for j in jobs]
    logger.info("%s: %d compaction jobs on Spark (%s) in %.1f s: %d committed, %d failed", table.name, len(jobs),
                config.spark_master, time.perf_counter() - started, sum(r.status == "committed" for r in out),
                sum(r.status == "failed" for r in out))
    return out


def batch_runner(config: SleeperConfig, state_store: StateStore, run_id: Optional[str] = None) -> BatchRunner:
    """The ``spark`` entry of :data:`sleeper_ops.compaction.runners.BATCH_RUNNERS`: a
    function running a batch of one table's assigned jobs with
    :func:`submit_compaction_batch` on ``config``, recording ``run_id``."""

    def run(table: TableInfo, jobs: list[CompactionJob]) -> list[JobResult]:
        return submit_compaction_batch(config, state_store, table, jobs, run_id=run_id)

    return run
