"""Code that runs on the Spark executors for a bulk import (no pyspark import: pickled by
reference and imported on the executors' Python).

Two ways to make each leaf's rows meet in one task (see :mod:`sleeper_ops.spark.bulk_driver`
and docs/adr/0001-bulk-import-shuffle.md):

``runs`` (the default): :func:`sort_runs` reads input files through pyarrow, sorts the
rows and splits them by leaf as standard ingest does (:mod:`sleeper_ops.engine.key_order`;
where that does not apply, each leaf's rows are sorted in Arrow) and writes them as a sorted run file
(uncompressed Arrow IPC) under the job's run prefix in the object store, yielding
``(leaf, run, rows)``; the driver collects those small rows and gives each leaf's runs
to one task, where :func:`merge_runs` merges them (DataFusion, streaming) into the
leaf's file. Only file names cross the JVM, and there is no shuffle stage.

Both ways write the leaf files in the ingest level's codec
(:meth:`~sleeper_ops.io.datafile.ParquetSettings.for_ingest`), as standard ingest does.

``spark``: two ``mapInArrow`` stages with Spark's own shuffle of the rows:

* :func:`read_and_tag` reads input files through pyarrow (so S3 needs no Hadoop jars)
  and appends each row's leaf partition as the column ``__leaf`` (an index into the
  plan's leaves);
* :func:`write_leaves`, after Spark has repartitioned the rows by ``__leaf`` so each
  leaf's rows meet in one task, sorts each leaf's rows in Arrow and writes one file
  (plus its sketches) under the key the plan names for that leaf, then yields one row
  per file: ``leaf``, ``key``, ``records``.

Every object is written under a key of the task attempt's own
(:func:`~sleeper_ops.spark.attempts.own_key`: the planned key tagged with the attempt
id), so two attempts of a task (speculation, a retry after a lost executor) never
write, or on failure delete, the same object; the driver uses the keys in the results
that reached it.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sleeper_ops.engine.key_order import sorted_by_leaf
from sleeper_ops.engine.leaves import leaf_indices, sorted_rows
from sleeper_ops.engine.merge import merge_sorted
from sleeper_ops.io.arrow_schema import arrow_schema
from sleeper_ops.io.datafile import ParquetSettings, write_data_file
from sleeper_ops.io.inputs import read_batches
from sleeper_ops.io.storage import ObjectStore, S3Options
from sleeper_ops.spark.attempts import own_key
from sleeper_ops.spark.executor import table_from_dict
from statestore.partitions import Partition, PartitionTree

LEAF_COLUMN = "__leaf"
RESULT_SCHEMA = pa.schema([("leaf", pa.string()), ("key", pa.string()), ("records", pa.int64())])
RUN_SCHEMA = pa.schema([("leaf", pa.string()), ("run", pa.string()), ("rows", pa.int64())])
#: rows a task gathers before it writes its runs (one run per leaf per flush)
RUN_ROWS = 2_000_000
#: runs are uncompressed Arrow IPC files: written and read back at memory speed (an
#: uncompressed Parquet run took 2.4x as long to write and 9x to read)
RUN_SUFFIX = ".arrow"


def _context(context: Mapping[str, Any]) -> tuple[Any, ObjectStore, PartitionTree, list[str], S3Options | None]:
    s3 = S3Options(**context["s3"]) if context["s3"] is not None else None
    table = table_from_dict(context["table"])
    tree = PartitionTree([Partition.from_dict(p) for p in context["partitions"]])
    return table, ObjectStore(context["uri"], s3), tree, list(context["leaves"]), s3


def read_and_tag(context: Mapping[str, Any], batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each input batch holds file paths (column ``path``); yield their records with
    ``__leaf`` appended."""
    table, _, tree, leaves, s3 = _context(context)
    index = {leaf: i for i, leaf in enumerate(leaves)}
    for paths in batches:
        for path in paths.column("path").to_pylist():
            for b in read_batches(path, table.schema, s3, batch_rows=context.get("batch_rows", 65_536)):
                tags = np.zeros(b.num_rows, dtype=np.int32)
                for leaf, idx in leaf_indices(pa.Table.from_batches([b]), tree):
                    if idx is None:
                        tags[:] = index[leaf.id]
                    else:
                        tags[idx] = index[leaf.id]
                yield b.append_column(LEAF_COLUMN, pa.array(tags, pa.int32()))


def write_leaves(context: Mapping[str, Any], batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Group this task's rows by ``__leaf``, sort each leaf's rows and write its file;
    yield ``(leaf, key, records)`` per file written."""
    table, objects, _, leaves, _ = _context(context)
    schema = arrow_schema(table.schema)
    parts: dict[int, list[pa.RecordBatch]] = {}
    for b in batches:
        if b.num_rows == 0:
            continue
        tags = b.column(LEAF_COLUMN)
        rows = pa.RecordBatch.from_arrays(b.columns[:-1], names=b.schema.names[:-1])
        for leaf in pc.unique(tags).to_pylist():
            parts.setdefault(leaf, []).append(rows.filter(pc.equal(tags, leaf)))
    settings = ParquetSettings.for_ingest(table)
    for leaf, chunks in sorted(parts.items()):
        data = sorted_rows(pa.Table.from_batches(chunks).cast(schema), None, table.schema)
        key = own_key(context["output_keys"][leaves[leaf]])
        written = write_data_file(objects, key, table.schema, data, settings)
        yield pa.RecordBatch.from_pydict({"leaf": [leaves[leaf]], "key": [key], "records": [written.record_count]},
                                         schema=RESULT_SCHEMA)


def sort_runs(context: Mapping[str, Any], batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Read this task's input files (column ``path``), gather up to :data:`RUN_ROWS`
    rows, then write one sorted run per leaf under ``context["run_prefix"]``; yield
    ``(leaf, run, rows)`` per run, each run named by this task attempt."""
    table, objects, tree, _, s3 = _context(context)
    schema = arrow_schema(table.schema)
    pending: list[pa.RecordBatch] = []
    rows = flushes = 0
    task = None

    def flush() -> Iterator[pa.RecordBatch]:
        nonlocal pending, rows, flushes
        data = pa.Table.from_batches(pending, schema=schema).combine_chunks()
        out_leaf, out_run, out_rows = [], [], []
        parts = sorted_by_leaf(data, tree, table.schema)  # standard ingest's sort, where it applies
        if parts is None:
            parts = [(leaf, functools.partial(sorted_rows, data, idx, table.schema))
                     for leaf, idx in leaf_indices(data, tree)]
        for leaf, rows_of in parts:
            part = rows_of()
            run = own_key(f"{context['run_prefix']}/{task}-{flushes}-{leaf.id}{RUN_SUFFIX}")
            with objects.open_output(run) as f, pa.ipc.new_file(f, part.schema) as out:
                out.write_table(part, max_chunksize=65_536)
            out_leaf.append(leaf.id)
            out_run.append(run)
            out_rows.append(part.num_rows)
        pending, rows, flushes = [], 0, flushes + 1
        yield pa.RecordBatch.from_pydict({"leaf": out_leaf, "run": out_run, "rows": out_rows}, schema=RUN_SCHEMA)

    for paths in batches:
        for path in paths.column("path").to_pylist():
            task = task or hashlib.sha256(path.encode()).hexdigest()[:16]
            for b in read_batches(path, table.schema, s3, batch_rows=context.get("batch_rows", 65_536)):
                pending.append(b)
                rows += b.num_rows
                if rows >= RUN_ROWS:
                    yield from flush()
    if rows:
        yield from flush()


def merge_runs(context: Mapping[str, Any], batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Merge each leaf's sorted runs (rows ``(leaf, run, rows)`` of this task) into the
    leaf's file under the key the plan names; yield ``(leaf, key, records)`` per file."""
    table, objects, _, _, _ = _context(context)
    runs: dict[str, list[str]] = {}
    for b in batches:
        for leaf, run in zip(b.column("leaf").to_pylist(), b.column("run").to_pylist()):
            runs.setdefault(leaf, []).append(run)
    settings = ParquetSettings.for_ingest(table)
    for leaf, keys in sorted(runs.items()):
        paths, store, url = objects.datafusion_paths(sorted(keys))
        key = own_key(context["output_keys"][leaf])
        written = write_data_file(objects, key, table.schema,
                                  merge_sorted(paths, table.schema, object_store=store, store_url=url), settings)
        yield pa.RecordBatch.from_pydict({"leaf": [leaf], "key": [key], "records": [written.record_count]},
                                         schema=RESULT_SCHEMA)


def sort_runs_of(context: Mapping[str, Any], packs: Iterable[Sequence[str]]) -> Iterator[tuple[str, str, int]]:
    """:func:`sort_runs` as an RDD partition function: each element is a pack of input
    paths; yields ``(leaf, run, rows)`` per run written."""
    for pack in packs:
        for b in sort_runs(context, [pa.record_batch({"path": pa.array(list(pack), pa.string())})]):
            yield from zip(b.column("leaf").to_pylist(), b.column("run").to_pylist(), b.column("rows").to_pylist())


def merge_runs_of(context: Mapping[str, Any],
                  groups: Iterable[Sequence[tuple[str, Sequence[str]]]]) -> Iterator[tuple[str, str, int]]:
    """:func:`merge_runs` as an RDD partition function: each element is a group of
    leaves, ``(leaf, runs)`` each, merged one after the other; yields ``(leaf, key,
    records)`` per leaf file written."""
    for group in groups:
        for leaf, runs in group:
            batch = pa.record_batch({"leaf": pa.array([leaf] * len(runs), pa.string()),
                                     "run": pa.array(list(runs), pa.string())})
            for b in merge_runs(context, [batch]):
                yield from zip(b.column("leaf").to_pylist(), b.column("key").to_pylist(),
                               b.column("records").to_pylist())
