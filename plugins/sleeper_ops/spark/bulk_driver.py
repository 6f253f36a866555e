"""The Spark driver of a bulk import: ``spark_apps/bulk_import.py`` calls :func:`main`.

:func:`spark_runner` is the ``run`` of :func:`sleeper_ops.bulk_import.job.bulk_import`
on a SparkSession. The input files are packed into tasks of about equal bytes (a few
per core, the biggest first, so the cores finish together). With the default ``runs``
shuffle, one RDD job writes sorted runs per leaf
(:func:`~sleeper_ops.spark.bulk_executor.sort_runs_of`; pyarrow reads the inputs on the
executors), the driver collects their names, and a second RDD job merges each leaf's
runs, a task per core, each merging the leaves packed into it by rows, biggest first
(:func:`~sleeper_ops.spark.bulk_executor.merge_runs_of`): only paths and names cross the
JVM, so Spark SQL and its Arrow path (seconds to start in a fresh session) are not used;
the runs are deleted once every task attempt of both jobs has ended
(:func:`~sleeper_ops.spark.attempts.wait_for_attempts`), so no duplicate attempt
still reading them fails for it. With ``spark``, ``mapInArrow``
tags each row with its leaf (:func:`~sleeper_ops.spark.bulk_executor.read_and_tag`),
``repartition`` by leaf makes each leaf's rows meet in one task, and ``mapInArrow``
sorts and writes one file per leaf (:func:`~sleeper_ops.spark.bulk_executor.write_leaves`);
the driver collects what was written. Every attempt writes keys of its own
(:mod:`sleeper_ops.spark.attempts`); the keys returned are those of the attempts whose
results reached the driver. The state store is touched only here, on the
driver (the job record, the one commit); this is the only bulk-import module that
imports pyspark, and only inside functions.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import time
from dataclasses import asdict
from typing import Any, Optional, Sequence

from sleeper_ops.bulk_import.job import BulkImportResult, ImportPlan, LeafOutput, Runner, bulk_import, scratch_prefix
from sleeper_ops.bulk_import.sources import pack_files
from sleeper_ops.io.arrow_schema import arrow_schema
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.spark.attempts import wait_for_attempts
from sleeper_ops.spark.bulk_executor import LEAF_COLUMN, merge_runs_of, read_and_tag, sort_runs_of, write_leaves
from sleeper_ops.spark.executor import table_to_dict
from statestore.errors import SleeperError

logger = logging.getLogger(__name__)


SHUFFLES = ("runs", "spark")
#: read tasks per core: enough that tasks of unequal length even out over the cores,
#: few enough that each leaf merges few runs and few tasks pay a launch (60-70 ms each
#: on a 2-core machine; 4 a core measured no faster on 4 M rows)
READ_TASKS_PER_CORE = 2


def _path_rows(pack: list[str]) -> list[tuple[str]]:
    return [(p,) for p in pack]


def _merge_tasks(runs: Sequence[tuple[str, str, int]], tasks: int) -> list[list[tuple[str, list[str]]]]:
    """The runs (``(leaf, run, rows)``) of each leaf, the leaves packed into at most
    ``tasks`` groups of about equal rows (the biggest leaf first into the lightest group;
    the heaviest group first), one merge task each: launching a task costs about as much
    as merging a leaf of half a million rows (60-70 ms on a 2-core machine), so a task
    per leaf spent a third of the merge stage between tasks."""
    by_leaf: dict[str, list[str]] = {}
    size: dict[str, int] = {}
    for leaf, run, rows in runs:
        by_leaf.setdefault(leaf, []).append(run)
        size[leaf] = size.get(leaf, 0) + int(rows)
    leaves = sorted(by_leaf)
    return [[(leaf, sorted(by_leaf[leaf])) for leaf in group]
            for group in pack_files(leaves, [size[leaf] for leaf in leaves], tasks)]


def spark_runner(spark: Any, objects: ObjectStore, *, batch_rows: int = 65_536, shuffle: str = "runs") -> Runner:
    """The bulk import ``run`` on ``spark`` (see the module docstring); ``shuffle`` is
    how each leaf's rows meet in one task: ``runs`` (sorted run files, only their names
    shuffled) or ``spark`` (Spark shuffles the rows)."""
    if shuffle not in SHUFFLES:
        raise ValueError(f"shuffle must be one of {SHUFFLES}, got {shuffle!r}")
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import IntegerType, StructField

    def run(plan: ImportPlan) -> list[LeafOutput]:
        leaves = sorted(plan.output_keys)
        context = {"uri": objects.uri, "s3": asdict(objects.s3) if objects.s3 is not None else None,
                   "table": table_to_dict(plan.table), "partitions": [p.to_dict() for p in plan.partitions],
                   "leaves": leaves, "output_keys": plan.output_keys, "batch_rows": batch_rows}
        rows_type = from_arrow_schema(arrow_schema(plan.table.schema))
        tagged_type = rows_type.add(StructField(LEAF_COLUMN, IntegerType(), False))
        sc = spark.sparkContext
        sc.setJobDescription(f"sleeper bulk import into {plan.table.name}: {len(plan.files)} files")
        # files packed into tasks of about equal bytes, largest first, one pack per task
        packs = pack_files(plan.files, plan.file_bytes, READ_TASKS_PER_CORE * sc.defaultParallelism)
        if shuffle == "runs":
            prefix = scratch_prefix(plan.table.table_id, plan.job_id, plan.attempt)
            context["run_prefix"] = prefix
            group = f"sleeper-bulk-import-{plan.job_id}-{plan.attempt}"
            sc.setJobGroup(group, f"sleeper bulk import into {plan.table.name}: {len(plan.files)} files")
            jobs = 0
            try:
                # plain RDD jobs: only paths and run names cross the JVM, so nothing needs
                # Spark SQL's Arrow path (whose first use in a session costs seconds)
                t0 = time.perf_counter()
                runs = sc.parallelize(packs, len(packs)).mapPartitions(
                    functools.partial(sort_runs_of, context)).collect()
                jobs = 1
                t1 = time.perf_counter()
                # each leaf's runs merged by one task, a task per core, leaves packed by
                # rows: no shuffle stage
                groups = _merge_tasks(runs, sc.defaultParallelism)
                merged = sc.parallelize(groups, max(1, len(groups))).mapPartitions(
                    functools.partial(merge_runs_of, context)).collect()
                jobs = 2
                logger.info("%s: read and sorted %d files into %d runs in %d tasks in %.1f s; merged them into "
                            "%d leaf files in %.1f s", plan.table.name, len(plan.files), len(runs), len(packs),
                            t1 - t0, len(merged), time.perf_counter() - t1)
            finally:
                # the runs go once no attempt of either job still reads or writes them
                try:
                    wait_for_attempts(sc, group, jobs=jobs)
                except Exception as e:  # a loser still reading its runs can only fail
                    logger.warning("%s: cannot follow the Spark attempts of %s: %s", plan.table.name, group, e)
                for o in list(objects.list(prefix)):
                    objects.delete(o.key)
            return [LeafOutput(leaf, key, int(records)) for leaf, key, records in merged]
        paths = spark.createDataFrame(sc.parallelize(packs, len(packs)).flatMap(_path_rows), "path string")
        tagged = paths.mapInArrow(functools.partial(read_and_tag, context), tagged_type)
        by_leaf = tagged.repartition(max(1, len(leaves)), LEAF_COLUMN)
        written = by_leaf.mapInArrow(functools.partial(write_leaves, context),
                                     "leaf string, key string, records long").collect()
        return [LeafOutput(r["leaf"], r["key"], int(r["records"])) for r in written]

    return run


def import_on(spark: Any, sleeper: Any, table_name: str, sources: Sequence[str], *, import_key: Optional[str],
              run_id: Optional[str] = None, ingest_job_id: Optional[str] = None,
              shuffle: str = "runs") -> dict[str, Any]:
    """One bulk import into ``table_name`` on ``spark`` with ``sleeper``'s stores (a
    :class:`~sleeper_ops.api.Sleeper`): what both this driver's :func:`main` and the
    Spark service (:mod:`sleeper_ops.spark.service`) run.

    Returns ``{"result": asdict(BulkImportResult) | None, "error": str | None,
    "driver_seconds": float}``; an import refused or failed with a SleeperError comes
    back as ``error``; any other failure (Spark's) is raised, the job recorded failed.
    """
    started = time.perf_counter()
    outcome: dict[str, Any]
    try:
        table = sleeper.state_store.get_table(table_name)
        run = spark_runner(spark, sleeper.objects, shuffle=shuffle)
        result = bulk_import(sleeper.state_store, sleeper.objects, table, sources, run=run, import_key=import_key,
                             run_id=run_id, s3=sleeper.s3, ingest_job_id=ingest_job_id)
        outcome = {"result": asdict(result), "error": None}
    except SleeperError as e:
        logger.error("%s", e)
        outcome = {"result": None, "error": f"{type(e).__name__}: {e}"}
    outcome["driver_seconds"] = time.perf_counter() - started
    return outcome


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="spark_apps/bulk_import.py",
                                description="Bulk import files into a Sleeper table on Spark, in one commit.")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--home", default=None, help="SLEEPER_HOME (default: $SLEEPER_HOME or ./.sleeper)")
    where.add_argument("--config-file", default=None, help="the configuration, instead of HOME/sleeper.toml")
    p.add_argument("--table", required=True)
    p.add_argument("--source", action="append", default=[], help="a file, directory or glob (repeatable)")
    p.add_argument("--sources", default=None,
                   help="sources separated by commas (as the property sleeper.table.bulk.import.source holds them)")
    p.add_argument("--import-key", default=None, help="imports of the same key add their records once")
    p.add_argument("--run-id", default=None)
    p.add_argument("--ingest-job-id", default=None, help="mark this batcher job's ingest requests in the commit")
    p.add_argument("--results-file", default=None, help="where to write the result (JSON)")
    p.add_argument("--shuffle", choices=SHUFFLES, default="runs",
                   help="how each leaf's rows meet in one task: sorted run files (default) or Spark's shuffle")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None, *, spark: Any = None) -> int:
    """Run one bulk import; exit 0 when it committed or was already imported, else 1.

    ``--config-file`` may be an ``s3://`` URI (an EMR Serverless job's). ``spark``: a
    session to run on and leave running (a test playing EMR); by default one is built
    from spark-submit's settings and stopped at the end."""
    args = _parse_args(argv)
    sources = [*args.source, *(s.strip() for s in (args.sources or "").split(","))]
    sources = [s for s in sources if s]
    if not sources:
        raise SystemExit("spark_apps/bulk_import.py: no source given (--source or --sources)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    from sleeper_ops.api import Sleeper
    from sleeper_ops.spark.batch_files import read_config_file

    config = read_config_file(args.config_file) if args.config_file is not None else None
    with (Sleeper(config=config) if config is not None else Sleeper(home=args.home)) as sleeper:
        session = spark or SparkSession.builder.appName(f"sleeper-bulk-import-{args.table}").getOrCreate()
        try:
            outcome = import_on(session, sleeper, args.table, sources, import_key=args.import_key,
                                run_id=args.run_id, ingest_job_id=args.ingest_job_id, shuffle=args.shuffle)
        finally:
            if spark is None:
                session.stop()
    if args.results_file is not None:
        with open(args.results_file, "w") as f:
            json.dump(outcome, f)
    if outcome["result"] is not None:
        logger.info("%s", BulkImportResult(**outcome["result"]).summary())
    return 0 if outcome["error"] is None else 1
