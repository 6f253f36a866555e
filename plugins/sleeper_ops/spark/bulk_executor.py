"""Code that runs on the Spark executors for a bulk import (no pyspark import: pickled by
reference and imported on the executors' Python).

Two ``mapInArrow`` stages (see :mod:`sleeper_ops.spark.bulk_driver`):

* :func:`read_and_tag` reads input files through pyarrow (so S3 needs no Hadoop jars)
  and appends each row's leaf partition as the column ``__leaf`` (an index into the
  plan's leaves);
* :func:`write_leaves`, after Spark has repartitioned the rows by ``__leaf`` so each
  leaf's rows meet in one task, sorts each leaf's rows in Arrow and writes one file
  (plus its sketches) under the key the plan names for that leaf, then yields one row
  per file: ``leaf``, ``key``, ``records``. A retried task rewrites the same keys.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sleeper_ops.engine.leaves import leaf_indices
from sleeper_ops.io.arrow_schema import arrow_schema, sort_keys
from sleeper_ops.io.datafile import ParquetSettings, write_data_file
from sleeper_ops.io.inputs import read_batches
from sleeper_ops.io.storage import ObjectStore, S3Options
from sleeper_ops.spark.executor import table_from_dict
from statestore.partitions import Partition, PartitionTree

LEAF_COLUMN = "__leaf"
RESULT_SCHEMA = pa.schema([("leaf", pa.string()), ("key", pa.string()), ("records", pa.int64())])


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
    settings = ParquetSettings.of(table)
    for leaf, chunks in sorted(parts.items()):
        data = pa.Table.from_batches(chunks).cast(schema)
        data = data.take(pc.sort_indices(data, sort_keys=sort_keys(table.schema)))
        key = context["output_keys"][leaves[leaf]]
        written = write_data_file(objects, key, table.schema, data, settings)
        yield pa.RecordBatch.from_pydict({"leaf": [leaves[leaf]], "key": [key], "records": [written.record_count]},
                                         schema=RESULT_SCHEMA)
