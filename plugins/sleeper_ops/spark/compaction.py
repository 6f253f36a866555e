"""Compaction runner ``spark``: a batch of jobs in one spark-submit, one job a Spark task.

Spark is never on the per-job path: its start-up (10-20 s) is paid once a batch.

Three places run code from this module:

* the submitter, :func:`submit_compaction_batch`, in the process that created the
  jobs (the CLI, the Python API, an Airflow task): it writes the batch to a jobs
  file, runs ``spark-submit spark_apps/compaction.py`` (:func:`spark_submit_command`),
  streams Spark's log to this module's logger and reads the results file back;
* the Spark driver, :func:`main` (what ``spark_apps/compaction.py`` calls; also usable
  on its own, e.g. from Airflow's SparkSubmitOperator after a separate job-creation
  task): it opens the configuration from ``--home``, marks each job started, runs
  the batch (:func:`run_compaction_batch`), commits each output with
  :func:`~sleeper_ops.compaction.execute.record_commit` and writes the results file;
* the executors, one job a task: each rebuilds the object store and the table from
  plain data shipped with the task and calls
  :func:`~sleeper_ops.compaction.execute.execute_job`. Executors never touch the state
  store; S3 is reached from them through pyarrow and DataFusion with the endpoint and
  credentials of the configuration, so Spark needs no Hadoop S3 jars.

Guarantees: every job of the batch comes back as exactly one
:class:`~sleeper_ops.compaction.execute.JobResult`, committed, refused or failed, and
:func:`submit_compaction_batch` never raises for a job or batch failure: a job that
fails in its task is recorded failed with the error; if spark-submit itself fails,
every job it did not report is recorded failed with the tail of its log (a job the
driver had already committed keeps its committed record). Commits are the usual
atomic replace of references, so a failed or repeated batch never loses or
duplicates records; outputs of a batch that died before committing are orphans for
garbage collection.

Jobs and results files are JSON (:func:`write_jobs_file`, :func:`read_jobs_file`,
:func:`write_results_file`, :func:`read_results_file`), at local paths or ``s3://``
URIs (reached with the object store's S3 options).
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib.resources
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Optional, Sequence

import pyarrow.fs as pafs

from sleeper_ops.compaction.jobs import CompactionJob
from sleeper_ops.compaction.execute import JobOutput, JobResult, execute_job, record_commit
from sleeper_ops.io.datafile import WrittenFile
from sleeper_ops.errors import ConfigError
from sleeper_ops.io.storage import ObjectStore, S3Options
from statestore.catalog import TableInfo
from statestore.errors import SleeperError
from statestore.jobs import JobRecord
from statestore.region import Region
from statestore.schema import Schema
from statestore.store import StateStore

if TYPE_CHECKING:
    from sleeper_ops.config import SleeperConfig

logger = logging.getLogger(__name__)

#: Version of the jobs and results file formats; readers refuse other versions.
FILE_FORMAT_VERSION = 1
APP_NAME = "compaction.py"
#: Spark settings every submission gets unless overridden (``local`` masters also get
#: ``spark.driver.host=127.0.0.1``).
DEFAULT_SPARK_CONF: dict[str, str] = {"spark.ui.enabled": "false", "spark.log.level": "WARN"}
#: How much of spark-submit's log a failed job's reason quotes.
LOG_TAIL_LINES = 15
LOG_TAIL_CHARS = 2000


class SparkBatchError(SleeperError):
    """A batch could not be run on Spark (bad arguments, unreadable jobs file, Spark failed)."""


# ----- jobs and results files --------------------------------------------------------------

@dataclass(frozen=True)
class JobsFile:
    """A batch of compaction jobs of one table, as handed to the Spark driver."""

    table: str
    jobs: tuple[CompactionJob, ...]
    table_id: Optional[str] = None
    run_id: Optional[str] = None


def _filesystem(uri: str, s3: Optional[S3Options]) -> tuple[pafs.FileSystem, str]:
    if uri.startswith("s3://"):
        return (s3 or S3Options()).filesystem(), uri[len("s3://"):]
    return pafs.LocalFileSystem(), os.path.abspath(uri)


def _write_json(uri: str, doc: Any, s3: Optional[S3Options]) -> None:
    """Write ``doc`` whole: a local file appears by rename, an S3 object by one PUT."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    fs, path = _filesystem(uri, s3)
    if isinstance(fs, pafs.LocalFileSystem):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return
    with fs.open_output_stream(path) as out:
        out.write(data)


def _read_json(uri: str, what: str, s3: Optional[S3Options]) -> dict[str, Any]:
    fs, path = _filesystem(uri, s3)
    try:
        with fs.open_input_stream(path) as f:
            doc = json.loads(f.read())
    except (OSError, ValueError) as e:
        raise SparkBatchError(f"cannot read the {what} file {uri}: {e}") from e
    if not isinstance(doc, dict) or doc.get("version") != FILE_FORMAT_VERSION:
        raise SparkBatchError(f"{uri} is not a version {FILE_FORMAT_VERSION} {what} file")
    return doc


def write_jobs_file(uri: str, table: str, jobs: Sequence[CompactionJob], *, table_id: Optional[str] = None,
                    run_id: Optional[str] = None, s3: Optional[S3Options] = None) -> None:
    """Write a batch of ``table``'s jobs for :func:`main` (``--jobs-file``)."""
    _write_json(uri, {"version": FILE_FORMAT_VERSION, "table": table, "table_id": table_id, "run_id": run_id,
                      "jobs": [j.to_dict() for j in jobs]}, s3)


def read_jobs_file(uri: str, s3: Optional[S3Options] = None) -> JobsFile:
    """Read a file written by :func:`write_jobs_file`; :class:`SparkBatchError` if it is not one."""
    doc = _read_json(uri, "jobs", s3)
    try:
        jobs = tuple(CompactionJob.from_dict(d) for d in doc["jobs"])
        return JobsFile(doc["table"], jobs, doc.get("table_id"), doc.get("run_id"))
    except (KeyError, TypeError) as e:
        raise SparkBatchError(f"{uri} is not a valid jobs file: {e!r}") from e


def write_results_file(uri: str, results: Sequence[JobResult], *, s3: Optional[S3Options] = None,
                       error: Optional[str] = None) -> None:
    """Write what became of each job; ``error`` says why the batch as a whole failed."""
    _write_json(uri, {"version": FILE_FORMAT_VERSION, "error": error, "results": [
        {"job_id": r.job.job_id, "status": r.status, "rows_read": r.rows_read, "rows_written": r.rows_written,
         "seconds": r.seconds, "output": r.output, "reason": r.reason} for r in results]}, s3)


def read_results_file(uri: str, jobs: Sequence[CompactionJob], *,
                      s3: Optional[S3Options] = None) -> dict[str, JobResult]:
    """The results of ``jobs`` found in a file written by :func:`write_results_file`,
    by job id (jobs the file does not mention are missing from the answer)."""
    doc = _read_json(uri, "results", s3)
    by_id = {j.job_id: j for j in jobs}
    out: dict[str, JobResult] = {}
    try:
        for d in doc["results"]:
            job = by_id.get(d["job_id"])
            if job is not None:
                out[job.job_id] = JobResult(job, d["status"], int(d["rows_read"]), int(d["rows_written"]),
                                            float(d["seconds"]), d.get("output"), d.get("reason"))
    except (KeyError, TypeError, ValueError) as e:
        raise SparkBatchError(f"{uri} is not a valid results file: {e!r}") from e
    return out


# ----- the submitter -----------------------------------------------------------------------

def spark_app_path() -> Path:
    """``spark_apps/compaction.py``: in the checkout, or in the installed package
    ``sleeper_ops.spark.apps`` (a real file either way, as spark-submit needs)."""
    path = Path(str(importlib.resources.files("sleeper_ops.spark.apps"))) / APP_NAME
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
                  results_file: Optional[str] = None, run_id: Optional[str] = None) -> list[str]:
    """The arguments of ``spark_apps/compaction.py`` (see :func:`main`)."""
    args = ["--home", str(config.home), "--table", table]
    for flag, value in (("--jobs-file", jobs_file), ("--results-file", results_file), ("--run-id", run_id)):
        if value is not None:
            args += [flag, value]
    return args


def spark_submit_command(config: SleeperConfig, table: str, *, jobs_file: Optional[str] = None,
                         results_file: Optional[str] = None, run_id: Optional[str] = None,
                         spark_submit: Optional[str] = None, conf: Optional[Mapping[str, str]] = None) -> list[str]:
    """The spark-submit command line running a batch of ``table``'s compaction."""
    cmd = [spark_submit or find_spark_submit(), "--master", config.spark_master,
           "--name", f"sleeper-compaction-{table}"]
    for k, v in spark_conf(config.spark_master, conf).items():
        cmd += ["--conf", f"{k}={v}"]
    return cmd + [str(spark_app_path())] + app_arguments(config, table, jobs_file=jobs_file,
                                                         results_file=results_file, run_id=run_id)


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


def _run_spark_submit(cmd: list[str], env: Mapping[str, str], timeout: Optional[float]) -> tuple[int, str]:
    """Run ``cmd``, logging its output as it comes; returns (exit code, tail of stderr)."""
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


def _unreported(state_store: StateStore, table: TableInfo, job: CompactionJob, reason: str) -> JobResult:
    """The result of a job the Spark driver did not report: committed if its status
    record says so, else recorded failed with ``reason``."""
    try:
        rec = state_store.get_job(table.table_id, job.job_id)
        if rec is not None and rec.status == "committed":
            return JobResult(job, "committed", rec.rows_read, rec.rows_written, rec.duration_s or 0.0, rec.output)
        rec = rec or JobRecord.created(table.table_id, job.job_id, "compaction", partition_id=job.partition_id,
                                       input_files=len(job.inputs))
        state_store.put_job(rec.failed(reason))
    except Exception as e:  # noqa: BLE001 - the report must still come back
        logger.warning("could not record job %s failed: %s", job.job_id, e)
    return JobResult(job, "failed", reason=reason)


def submit_compaction_batch(config: SleeperConfig, state_store: StateStore, table: TableInfo,
                            jobs: Sequence[CompactionJob], *, run_id: Optional[str] = None,
                            spark_submit: Optional[str] = None, conf: Optional[Mapping[str, str]] = None,
                            timeout: Optional[float] = None) -> list[JobResult]:
    """Run ``jobs`` (already assigned) in one spark-submit; one result per job, in order.

    The Spark driver opens ``config.home``'s configuration itself and commits each job;
    ``state_store`` is used here only to record jobs the driver did not report (see the
    module docstring). ``spark_submit`` overrides the executable, ``conf`` adds Spark
    settings, ``timeout`` (seconds) kills a batch that runs too long.
    """
    if not jobs:
        return []
    jobs = list(jobs)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sleeper-spark-compaction-") as tmp:
        jobs_file, results_file = os.path.join(tmp, "jobs.json"), os.path.join(tmp, "results.json")
        write_jobs_file(jobs_file, table.name, jobs, table_id=table.table_id, run_id=run_id)
        try:
            cmd = spark_submit_command(config, table.name, jobs_file=jobs_file, results_file=results_file,
                                       run_id=run_id, spark_submit=spark_submit, conf=conf)
        except ConfigError as e:
            code, tail = -1, str(e)
        else:
            code, tail = _run_spark_submit(cmd, spark_environment(config.spark_master), timeout)
        results: dict[str, JobResult] = {}
        reason = f"spark-submit exited with code {code}: {tail}" if code else "spark-submit reported no result"
        if os.path.exists(results_file):
            try:
                results = read_results_file(results_file, jobs)
            except SparkBatchError as e:
                reason = f"{reason}; {e}"
    out = [results.get(j.job_id) or _unreported(state_store, table, j, reason) for j in jobs]
    logger.info("%s: %d compaction jobs on Spark (%s) in %.1f s: %d committed, %d failed", table.name, len(jobs),
                config.spark_master, time.perf_counter() - started, sum(r.status == "committed" for r in out),
                sum(r.status == "failed" for r in out))
    return out


# ----- the Spark driver --------------------------------------------------------------------

@dataclass
class BatchOutcome:
    """What :func:`run_compaction_batch` did: a result per job; ``error`` when the Spark
    job itself failed (every job it did not finish is then failed with that reason)."""

    results: list[JobResult] = field(default_factory=list)
    error: Optional[str] = None


def table_to_dict(table: TableInfo) -> dict[str, Any]:
    return {"table_id": table.table_id, "name": table.name, "schema": table.schema.to_dict(),
            "properties": dict(table.properties)}


def table_from_dict(d: Mapping[str, Any]) -> TableInfo:
    return TableInfo(d["table_id"], d["name"], Schema.from_dict(d["schema"]), dict(d["properties"]))


def _task_context(objects: ObjectStore, table: TableInfo) -> dict[str, Any]:
    """Everything an executor needs, as plain data (no state store)."""
    return {"uri": objects.uri, "s3": asdict(objects.s3) if objects.s3 is not None else None,
            "table": table_to_dict(table)}


def run_tasks(context: Mapping[str, Any], items: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    """Executor side: run each job of a Spark partition (one, normally); yields plain
    results and never raises for a job's failure."""
    s3 = S3Options(**context["s3"]) if context["s3"] is not None else None
    objects = ObjectStore(context["uri"], s3)
    table = table_from_dict(context["table"])
    worker = f"{socket.gethostname()}:{os.getpid()}"
    for item in items:
        job = CompactionJob.from_dict(item["job"])
        region = Region.from_dict(item["region"]) if item.get("region") is not None else None
        started = time.perf_counter()
        try:
            out = execute_job(job, table, objects, region=region)
        except Exception as e:  # noqa: BLE001 - reported to the driver, which records it
            traceback.print_exc()
            yield {"job_id": job.job_id, "error": f"{type(e).__name__}: {e}", "worker": worker,
                   "seconds": time.perf_counter() - started}
            continue
        yield {"job_id": job.job_id, "error": None, "worker": worker, "seconds": out.seconds,
               "output": out.output.key if out.output is not None else None,
               "record_count": out.output.record_count if out.output is not None else 0,
               "rows_read": out.rows_read, "rows_written": out.rows_written}


def _commit_task_result(state_store: StateStore, objects: ObjectStore, rec: JobRecord, job: CompactionJob,
                        r: Mapping[str, Any]) -> JobResult:
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
    except Exception as e:  # noqa: BLE001 - e.g. the state store went away; the job can be retried
        return JobResult(job, "failed", seconds=r.get("seconds", 0.0), reason=f"{type(e).__name__}: {e}")


def run_compaction_batch(spark_context: Any, state_store: StateStore, objects: ObjectStore, table: TableInfo,
                         jobs: Sequence[CompactionJob], *, run_id: Optional[str] = None) -> BatchOutcome:
    """Driver side: run ``jobs`` on ``spark_context``, one job a task, and commit each.

    Each job is recorded started first; the biggest jobs are scheduled first. Outputs
    are committed by this driver once the Spark job ends, each on its own.
    """
    outcome = BatchOutcome()
    if not jobs:
        return outcome
    regions = {p.id: p.region for p in state_store.partitions(table.table_id)}
    records: dict[str, JobRecord] = {}
    failed: dict[str, JobResult] = {}
    items = []
    for job in sorted(jobs, key=lambda j: -j.input_records):
        rec = state_store.get_job(table.table_id, job.job_id) or JobRecord.created(
            table.table_id, job.job_id, "compaction", partition_id=job.partition_id, input_files=len(job.inputs))
        rec = rec.started(run_id)
        state_store.put_job(rec)
        records[job.job_id] = rec
        region = regions.get(job.partition_id)
        if region is None and not job.whole_files:
            reason = f"partition {job.partition_id} does not exist"
            state_store.put_job(rec.failed(reason))
            failed[job.job_id] = JobResult(job, "failed", reason=reason)
            continue
        items.append({"job": job.to_dict(), "region": region.to_dict() if region is not None else None})
    task_results: dict[str, dict[str, Any]] = {}
    if items:
        fn = functools.partial(run_tasks, _task_context(objects, table))
        try:
            spark_context.setJobDescription(f"sleeper compaction of {table.name}: {len(items)} jobs")
            for r in spark_context.parallelize(items, numSlices=len(items)).mapPartitions(fn).collect():
                task_results[r["job_id"]] = r
        except Exception as e:  # noqa: BLE001 - e.g. an executor died; every job is then failed below
            outcome.error = f"Spark job failed: {type(e).__name__}: {str(e)[:LOG_TAIL_CHARS]}"
            logger.error("%s", outcome.error)
    for job in jobs:
        if job.job_id in failed:
            result = failed[job.job_id]
        elif job.job_id in task_results:
            result = _commit_task_result(state_store, objects, records[job.job_id], job, task_results[job.job_id])
        else:
            reason = outcome.error or "no result from Spark"
            state_store.put_job(records[job.job_id].failed(reason))
            result = JobResult(job, "failed", reason=reason)
        logger.info("job %s (partition %s, %d files): %s%s", job.job_id, job.partition_id, len(job.inputs),
                    result.status, f": {result.reason}" if result.reason else f", {result.rows_written:,} rows")
        outcome.results.append(result)
    return outcome


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="spark_apps/compaction.py",
                                description="Run a batch of a Sleeper table's compaction jobs on Spark.")
    p.add_argument("--home", default=None, help="SLEEPER_HOME (default: $SLEEPER_HOME or ./.sleeper)")
    p.add_argument("--table", required=True, help="the table's name")
    p.add_argument("--jobs-file", default=None,
                   help="jobs to run (written by write_jobs_file); default: create the table's jobs now")
    p.add_argument("--results-file", default=None, help="where to write what became of each job")
    p.add_argument("--run-id", default=None, help="the run recorded in the jobs' status records")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The Spark driver (``spark_apps/compaction.py``): run a batch, commit, report.

    Exits 0 when the batch ran, even if some jobs failed (their failures are in the
    results file and the status records); 1 when the batch itself could not run.
    """
    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    from sleeper_ops.api import Sleeper
    from sleeper_ops.compaction.jobs import create_compaction_jobs

    with Sleeper(home=args.home) as sleeper:
        s3 = sleeper.s3
        try:
            table = sleeper.state_store.get_table(args.table)
            if args.jobs_file is not None:
                batch = read_jobs_file(args.jobs_file, s3)
                run_id = args.run_id or batch.run_id
                jobs = list(batch.jobs)
                wrong = [j.job_id for j in jobs if j.table_id != table.table_id]
                if wrong:
                    raise SparkBatchError(f"jobs {', '.join(wrong[:5])} are not jobs of table {table.name} "
                                          f"({table.table_id})")
            else:
                run_id = args.run_id
                jobs = create_compaction_jobs(sleeper.state_store, table, run_id=run_id).jobs
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
                                               run_id=run_id)
            finally:
                spark.stop()
        if args.results_file is not None:
            write_results_file(args.results_file, outcome.results, s3=s3, error=outcome.error)
    return 1 if outcome.error else 0
