"""The files a batch crosses the spark-submit boundary with: jobs, results, configuration.

The submitter (:mod:`sleeper_ops.spark.submit`, or Airflow's Spark operator) writes
the jobs file and the configuration file; the Spark driver
(:mod:`sleeper_ops.spark.driver`) reads them and writes the results file, which the
submitter reads back.

Guarantees:

* jobs and results files are JSON tagged with :data:`FILE_FORMAT_VERSION`, at local
  paths or ``s3://`` URIs (reached with the given :class:`~sleeper_ops.io.storage.S3Options`);
  each is written whole (a local file appears by rename, an S3 object by one PUT), so a
  reader never sees half a file;
* readers refuse a file of another kind or version, or a missing or unreadable one, with
  :class:`SparkBatchError` naming the file;
* the configuration file is a local TOML file (a ``sleeper.toml`` plus its ``home``)
  created readable by its owner only (mode 0600), since it may carry a DSN password
  and S3 keys.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import pyarrow.fs as pafs
import tomli_w

from sleeper_ops.compaction.execute import JobResult
from sleeper_ops.compaction.jobs import CompactionJob
from sleeper_ops.config import SleeperConfig
from sleeper_ops.errors import ConfigError, IngestError
from sleeper_ops.io.storage import S3Options
from statestore.errors import SleeperError

#: Version of the jobs and results file formats; readers refuse other versions.
FILE_FORMAT_VERSION = 1


class SparkBatchError(SleeperError):
    """A batch could not be run on Spark (bad arguments, unreadable jobs file, Spark failed)."""


class BulkImportError(IngestError):
    """A bulk import did not commit (Spark failed, or the driver refused it)."""


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


def _write_local(path: str, data: bytes, mode: int = 0o666) -> None:
    """Write ``data`` to ``path`` by rename, the file created with ``mode`` (less the umask)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp)  # a leftover of a crash: its mode may be wider than ``mode``
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _write_json(uri: str, doc: Any, s3: Optional[S3Options]) -> None:
    """Write ``doc`` whole: a local file appears by rename, an S3 object by one PUT."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    fs, path = _filesystem(uri, s3)
    if isinstance(fs, pafs.LocalFileSystem):
        _write_local(path, data)
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
    """Write a batch of ``table``'s jobs for the driver's ``--jobs-file``."""
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


def results_document(results: Sequence[JobResult], error: Optional[str] = None) -> dict[str, Any]:
    """What became of each job, as plain data (the results file's content, also what the
    Spark service answers); ``error`` says why the batch as a whole failed."""
    return {"version": FILE_FORMAT_VERSION, "error": error, "results": [
        {"job_id": r.job.job_id, "status": r.status, "rows_read": r.rows_read, "rows_written": r.rows_written,
         "seconds": r.seconds, "output": r.output, "reason": r.reason} for r in results]}


def write_results_file(uri: str, results: Sequence[JobResult], *, s3: Optional[S3Options] = None,
                       error: Optional[str] = None) -> None:
    """Write what became of each job; ``error`` says why the batch as a whole failed."""
    _write_json(uri, results_document(results, error), s3)


def read_results_file(uri: str, jobs: Sequence[CompactionJob], *,
                      s3: Optional[S3Options] = None) -> dict[str, JobResult]:
    """The results of ``jobs`` found in a file written by :func:`write_results_file`,
    by job id (jobs the file does not mention are missing from the answer)."""
    return results_from_document(_read_json(uri, "results", s3), jobs, uri)


def results_from_document(doc: dict[str, Any], jobs: Sequence[CompactionJob], where: str) -> dict[str, JobResult]:
    """The results of ``jobs`` in a :func:`results_document` (read from ``where``), by job id."""
    if not isinstance(doc, dict) or doc.get("version") != FILE_FORMAT_VERSION:
        raise SparkBatchError(f"{where} is not a version {FILE_FORMAT_VERSION} results document")
    by_id = {j.job_id: j for j in jobs}
    out: dict[str, JobResult] = {}
    try:
        for d in doc["results"]:
            job = by_id.get(d["job_id"])
            if job is not None:
                out[job.job_id] = JobResult(job, d["status"], int(d["rows_read"]), int(d["rows_written"]),
                                            float(d["seconds"]), d.get("output"), d.get("reason"))
    except (KeyError, TypeError, ValueError) as e:
        raise SparkBatchError(f"{where} is not a valid results document: {e!r}") from e
    return out


def write_config_file(path: str | Path, config: SleeperConfig) -> None:
    """Write ``config`` for the driver's ``--config-file``: a local TOML file, created
    with mode 0600 and by rename, holding ``config``'s absolute home and
    :meth:`~sleeper_ops.config.SleeperConfig.to_dict`."""
    home = config.home.absolute()
    doc = {"home": str(home), **config.to_dict()}
    header = "# Sleeper configuration for one Spark batch; may hold secrets.\n"
    _write_local(os.path.abspath(path), (header + tomli_w.dumps(doc)).encode(), mode=0o600)


def _s3_from_environment() -> Optional[S3Options]:
    """S3 at the endpoint boto3 would use from the environment (pyarrow reads no such
    variable), or None (AWS)."""
    from urllib.parse import urlsplit

    url = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not url:
        return None
    parts = urlsplit(url)
    return S3Options(endpoint_override=parts.netloc, scheme=parts.scheme or "https",
                     region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))


def read_config_file(path: str | Path) -> SleeperConfig:
    """Read a file written by :func:`write_config_file` (see
    :meth:`~sleeper_ops.config.SleeperConfig.from_file`), or an ``s3://`` configuration
    object (an EMR Serverless job's, :mod:`sleeper_ops.spark.emr_serverless`: read with
    the AWS credential chain, at the endpoint ``AWS_ENDPOINT_URL_S3`` or
    ``AWS_ENDPOINT_URL`` names if set, as boto3 does; its home is the working directory
    unless it names one);
    ConfigError if it is not one."""
    uri = str(path)
    if not uri.startswith("s3://"):
        return SleeperConfig.from_file(path)
    import tomllib

    fs, key = _filesystem(uri, _s3_from_environment())
    try:
        with fs.open_input_stream(key) as f:
            raw = tomllib.loads(f.read().decode())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the configuration {uri}: {e}") from e
    home = raw.pop("home", None)
    return SleeperConfig.from_dict(Path(home) if isinstance(home, str) else Path.cwd(), raw)
