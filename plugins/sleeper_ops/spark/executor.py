"""Code that runs on the Spark executors: one compaction job a task.

The driver (:mod:`sleeper_ops.spark.driver`) ships :func:`run_tasks`, bound to a
:func:`task_context`, to the executors; each task rebuilds the object store and the
table from that plain data and calls :func:`~sleeper_ops.compaction.execute.execute_job`.

Guarantees: executors never touch the state store (the driver commits); each task
attempt writes its job's output under a key of its own
(:func:`~sleeper_ops.spark.attempts.own_key`: the key the job's record names, tagged
with the attempt's id), so a speculative or retried attempt never overwrites, nor on
failure deletes, another attempt's output; S3 is reached
through pyarrow and DataFusion with the endpoint and credentials of the configuration,
so Spark needs no Hadoop S3 jars; a job's failure comes back as a plain result with
the error, never as a failed task. This module does not import pyspark (only
:mod:`~sleeper_ops.spark.attempts` does, inside a task, for its attempt id): it is
pickled by reference and imported on the executors' Python.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from dataclasses import asdict
from typing import Any, Iterable, Iterator, Mapping, Sequence

from sleeper_ops.compaction.execute import execute_job
from sleeper_ops.compaction.jobs import CompactionJob
from sleeper_ops.io.storage import ObjectStore, S3Options
from sleeper_ops.spark.attempts import own_key
from statestore.catalog import TableInfo
from statestore.region import Region
from statestore.schema import Schema


def table_to_dict(table: TableInfo) -> dict[str, Any]:
    """``table`` as plain JSON-able data (its id, name, schema and properties)."""
    return {"table_id": table.table_id, "name": table.name, "schema": table.schema.to_dict(),
            "properties": dict(table.properties)}


def table_from_dict(d: Mapping[str, Any]) -> TableInfo:
    """The table :func:`table_to_dict` describes."""
    return TableInfo(d["table_id"], d["name"], Schema.from_dict(d["schema"]), dict(d["properties"]))


def task_context(objects: ObjectStore, table: TableInfo, python_modules: Sequence[str] = ()) -> dict[str, Any]:
    """Everything an executor needs to run ``table``'s jobs, as plain data: the object
    store's URI and S3 options, the table (no state store) and the modules its Python
    iterator may come from (the driver's ``iterators.python_modules``)."""
    return {"uri": objects.uri, "s3": asdict(objects.s3) if objects.s3 is not None else None,
            "table": table_to_dict(table), "python_modules": list(python_modules)}


def run_tasks(context: Mapping[str, Any], items: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    """Run each job of a Spark partition (one, normally); yields one plain result per
    job and never raises for a job's failure.

    Args:
        context: from :func:`task_context`.
        items: ``{"job": CompactionJob.to_dict(), "region": Region.to_dict() | None,
            "output_key": the key the job's record names}``; this attempt writes that
            key tagged with its attempt id.

    Yields:
        ``job_id``, ``worker`` (host:pid), ``seconds`` and ``error`` (None on success);
        on success also ``output`` (the key written, or None), ``record_count``,
        ``rows_read`` and ``rows_written``.
    """
    s3 = S3Options(**context["s3"]) if context["s3"] is not None else None
    objects = ObjectStore(context["uri"], s3)
    table = table_from_dict(context["table"])
    worker = f"{socket.gethostname()}:{os.getpid()}"
    for item in items:
        job = CompactionJob.from_dict(item["job"])
        region = Region.from_dict(item["region"]) if item.get("region") is not None else None
        named = item.get("output_key")
        started = time.perf_counter()
        try:
            out = execute_job(job, table, objects, region=region,
                              output_key=own_key(named) if named is not None else None,
                              python_modules=context.get("python_modules", ()))
        except Exception as e:
            traceback.print_exc()
            yield {"job_id": job.job_id, "error": f"{type(e).__name__}: {e}", "worker": worker,
                   "seconds": time.perf_counter() - started}
            continue
        yield {"job_id": job.job_id, "error": None, "worker": worker, "seconds": out.seconds,
               "output": out.output.key if out.output is not None else None,
               "record_count": out.output.record_count if out.output is not None else 0,
               "rows_read": out.rows_read, "rows_written": out.rows_written}
