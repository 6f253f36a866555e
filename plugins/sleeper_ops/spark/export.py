"""Export runner ``spark``: one Spark task a leaf (:mod:`sleeper_ops.query.export`).

The driver plans every leaf on one state of the table (the export core does, before
calling here); each leaf's plan -- its file references, regions, tombstones and buffered
records, plain data -- travels to its task, which reads it through the query path's
merge with the table's iterators (:meth:`~sleeper_ops.query.runner.QueryRunner.stream_tasks`)
and writes the leaf's Parquet file, with pyarrow (so S3 needs no Hadoop jars).

Guarantees: executors never touch the state store (the plan travels with the task;
the runner they build holds an empty in-memory store it never reads); each Spark task
attempt writes its own key (:func:`~sleeper_ops.spark.attempts.own_key`: the leaf's key
tagged with the attempt's id), so a speculative or retried attempt never overwrites
another's file; the driver waits until every attempt of its job has ended
(:func:`~sleeper_ops.spark.attempts.wait_for_attempts`: a speculative loser killed by
Spark may still be writing) before it answers, then the export moves each winner's file
(the attempt whose result reached the driver) to the leaf's final name, commits its
manifest and deletes the losers' files, which no attempt writes any more.

The session is ``SparkSession.builder.getOrCreate()`` on the configuration's
``[spark] master`` (an active session, e.g. a test's, is reused); its executors run this
process's Python (``PYSPARK_PYTHON`` unless set), as spark-submit's jobs do.
"""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from sleeper_ops.io.export_manifest import ExportedFile
from sleeper_ops.io.storage import ObjectStore, S3Options
from sleeper_ops.spark.attempts import own_key, wait_for_attempts
from sleeper_ops.spark.executor import table_from_dict, table_to_dict

if TYPE_CHECKING:
    from sleeper_ops.config import SleeperConfig
    from sleeper_ops.query.export import LeafJob, LeavesWriter
    from sleeper_ops.query.runner import QueryRunner


def write_leaves(*, config: SleeperConfig | None, table: str) -> LeavesWriter:
    """The ``spark`` leaves writer (for :func:`sleeper_ops.query.export.load_leaves_writer`)."""
    master = config.spark_master if config is not None else "local[*]"

    def run(runner: QueryRunner, dest: ObjectStore, jobs: Sequence[LeafJob]) -> list[ExportedFile]:
        from pyspark.sql import SparkSession

        if not jobs:
            return []
        # the executors run this Python, as spark-submit's jobs do (spark_environment), unless
        # PYSPARK_PYTHON says otherwise: PySpark's default ("python3") has no sleeper_ops
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = (SparkSession.builder.master(master).appName(f"sleeper-export-{table}")
                 .config("spark.ui.enabled", "false").getOrCreate())
        context = {"uri": dest.uri, "s3": asdict(dest.s3) if dest.s3 is not None else None,
                   "data_uri": runner.objects.uri,
                   "data_s3": asdict(runner.objects.s3) if runner.objects.s3 is not None else None,
                   "table": table_to_dict(runner.table), "python_modules": list(runner.python_modules)}
        sc = spark.sparkContext
        group = f"sleeper-export-{uuid.uuid4().hex}"
        sc.setJobGroup(group, f"sleeper export of {table} to {dest.uri}")
        try:
            results = (sc.parallelize(list(jobs), len(jobs))
                       .mapPartitions(lambda items: write_tasks(context, items)).collect())
        except BaseException:
            wait_for_attempts(sc, group)  # the job may not have started: do not wait for it to
            raise
        wait_for_attempts(sc, group, jobs=1)  # no loser writes once the leftovers are deleted
        by_index = {r["index"]: ExportedFile(r["leaf"], r["key"], r["rows"]) for r in results}
        return [by_index[j.index] for j in jobs]

    return run


def write_tasks(context: Mapping[str, Any], items: Iterable[LeafJob]) -> Iterator[dict[str, Any]]:
    """Executor side: write each leaf of a Spark partition (one, normally) under this
    attempt's own key; yields ``index``, ``leaf``, ``key`` and ``rows`` per leaf."""
    from dataclasses import replace

    from sleeper_ops.query.export import write_leaf
    from sleeper_ops.query.runner import QueryRunner
    from statestore.memory import InMemoryStateStore

    def store(uri: str, s3: Any) -> ObjectStore:
        return ObjectStore(uri, S3Options(**s3) if s3 is not None else None)

    dest = store(context["uri"], context["s3"])
    table = table_from_dict(context["table"])
    runner = QueryRunner(InMemoryStateStore(), store(context["data_uri"], context["data_s3"]), table, threads=2,
                         python_modules=context.get("python_modules", ()))
    try:
        for job in items:
            written = write_leaf(runner, dest, replace(job, key=own_key(job.key)))
            yield {"index": job.index, "leaf": written.leaf, "key": written.key, "rows": written.rows}
    finally:
        runner.close()
