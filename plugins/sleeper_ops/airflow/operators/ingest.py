"""Operators that add files to a table: ingest files at once, or run the table's ingest
batcher over its queued requests. Both announce the files they commit on the table's asset
(:mod:`sleeper_ops.airflow.assets.commits`) and go through the task runner
(:mod:`sleeper_ops.airflow.task_runner`).

    from sleeper_ops.airflow.operators.ingest import SleeperIngestOperator
    ingest = SleeperIngestOperator(task_id="ingest", table="events", files=["s3://raw/{{ ds }}/events.parquet"])
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from sleeper_ops.airflow import task_runner
from sleeper_ops.airflow.assets.commits import commit_extra, emit_commit_event, key_range_of, with_commit_outlets
from sleeper_ops.airflow.operators.base import SleeperOperator, task_request_id
from sleeper_ops.airflow.utils.openlineage import note
from sleeper_ops.errors import ConfigError

if TYPE_CHECKING:
    from sleeper_ops.api import Table

log = logging.getLogger(__name__)


class SleeperIngestOperator(SleeperOperator):
    """Ingest ``files`` (Parquet, CSV, JSON Lines; local paths or ``s3://`` URIs) into the
    table in one commit: all of them or none. Returns the records and files written.

    Every try of a task instance ingests under one idempotency key (``request_id``,
    default :func:`task_request_id`: DAG id, task id, run id), kept with the files'
    names and sizes: a retry after ``CommitOutcomeUnknownError`` or a worker killed
    after the commit adds nothing and answers the first ingest; the same key with other
    files (the DAG changed them between tries) fails the task in one line.

    Args:
        files: the files (templated: a list of templates, or one template rendering a path).
        request_id: the idempotency key (templated); default: the task instance's.
    """

    template_fields: Sequence[str] = ("table", "files", "request_id")

    def __init__(self, *, files: Union[str, Sequence[str]], request_id: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**with_commit_outlets(kwargs))
        self.files = files
        self.request_id = request_id

    def execute(self, context: Any) -> dict[str, Any]:
        files = [self.files] if isinstance(self.files, str) else list(self.files)
        if not files:
            raise ConfigError(f"nothing to ingest into {self.table}: no files given")
        key = self.request_id or task_request_id(context)

        def ingest(t: Table) -> tuple[Any, Optional[dict[str, Any]]]:
            result = t.ingest(files, request_id=key)
            if result.repeat:
                return result, None
            extra = commit_extra(t.sleeper, t.name, files=len(result.files), rows=result.records,
                                 key_range=key_range_of(t.sleeper, t.name, result.files))
            self.lineage = note(t.sleeper, t.name, inputs=files, column_lineage=True, rows=result.records,
                                files=len(result.files))
            return result, extra

        result, extra = task_runner.run_on_table("ingest", self.table, ingest, opener=self.hook.get_conn)
        if result.repeat:
            log.info("%s: a repeat of request id %s: job %s ingested these files already (%d records); "
                     "nothing more stored", self.table, key, result.job_id, result.records)
            return {"records": result.records, "files": [], "seconds": 0.0, "repeat": True, "job_id": result.job_id}
        log.info("%s: ingested %d records from %d files into %d files in %.1f s", self.table, result.records,
                 len(files), len(result.files), result.seconds)
        emit_commit_event(self, context, self.table, files=len(result.files), rows=result.records, extra=extra)
        return {"records": result.records, "files": [f.filename for f in result.files], "seconds": result.seconds}


class SleeperIngestBatcherOperator(SleeperOperator):
    """Group the table's pending ingest requests into jobs and run them; fails if a job
    failed or stalled waiting for compaction (its requests go back to pending for a later
    run; a stall's attempt does not count towards the requests' failing for good).

    Args:
        send_now: send every pending request now, not waiting for the table's job min size
            or max age (jobs still respect its max size and max files).
    """

    def __init__(self, *, send_now: bool = False, **kwargs: Any) -> None:
        super().__init__(**with_commit_outlets(kwargs))
        self.send_now = send_now

    def execute(self, context: Any) -> str:
        from sleeper_ops.ingest.batcher import run_ingest_batcher

        reports: list[Any] = []

        extras: list[dict[str, Any]] = []

        def run(t: Any, run_id: str) -> Any:
            reports.append(run_ingest_batcher(t.sleeper, t.name, run_id=run_id, send_now=self.send_now))
            r = reports[-1]
            files = sum(j.written for j in r.committed)
            extras.append(commit_extra(t.sleeper, t.name, files=files, rows=r.records))
            done = r.committed
            self.lineage = note(t.sleeper, t.name, inputs=[f for j in done for f in j.files], column_lineage=True,
                                rows=r.records,
                                files=files, size=sum(j.size_bytes for j in done))
            return r

        try:
            return task_runner.run_exclusive("ingest_batcher", self.table, context, run,
                                             failures=lambda report: len(report.failed) + len(report.stalled),
                                             opener=self.hook.get_conn)
        finally:  # committed jobs' files are announced even when another job failed
            if reports:
                emit_commit_event(self, context, self.table, files=sum(j.written for j in reports[0].committed),
                                  rows=reports[0].records, extra=extras[0] if extras else None)
