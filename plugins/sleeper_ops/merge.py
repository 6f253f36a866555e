"""Streaming sort-preserving merge of sorted Parquet files, in DataFusion.

The inputs' sort order is declared to DataFusion, one scan per file, and repartition
of scans and sorts is off, so the plan is a ``SortPreservingMergeExec`` over the
files with no ``SortExec``: memory stays bounded by a few batches per input however
large the inputs grow. An optional region filter keeps only the rows of one
partition. Batches come back with the table's Arrow schema.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

import pyarrow as pa

from sleeper_ops.arrow_schema import arrow_schema
from statestore.region import Region
from statestore.schema import Schema


def _session(n_inputs: int, batch_size: int) -> Any:
    from datafusion import SessionConfig, SessionContext

    cfg = (SessionConfig()
           .with_target_partitions(max(2, n_inputs))
           .with_repartition_file_scans(False)
           .with_repartition_sorts(False)
           .with_batch_size(batch_size)
           .set("datafusion.execution.parquet.schema_force_view_types", "false")
           .set("datafusion.execution.parquet.pushdown_filters", "false"))
    return SessionContext(cfg)


def region_filter(region: Region) -> Any:
    """A DataFusion predicate selecting the rows inside ``region``."""
    from datafusion import col, lit

    expr = None
    for r in region.ranges:
        parts = [col(r.field) >= lit(r.min)]
        if r.max is not None:
            parts.append(col(r.field) < lit(r.max))
        for p in parts:
            expr = p if expr is None else expr & p
    return expr


def merge_sorted(paths: Sequence[str], schema: Schema, *, region: Optional[Region] = None,
                 object_store: Any = None, store_url: Optional[str] = None,
                 batch_size: int = 65536) -> Iterator[pa.RecordBatch]:
    """Yield the rows of the sorted Parquet files at ``paths`` in key order.

    ``paths`` are local paths, or URLs under ``store_url`` when a DataFusion
    ``object_store`` is given (e.g. ``AmazonS3``).
    """
    from datafusion import col

    if not paths:
        return
    ctx = _session(len(paths), batch_size)
    if object_store is not None:
        ctx.register_object_store(store_url, object_store, None)
    target = arrow_schema(schema)
    order = [[col(n).sort(ascending=True, nulls_first=False) for n in schema.key_names]]
    df = None
    for i, p in enumerate(paths):
        name = f"input_{i}"
        ctx.register_parquet(name, p, file_sort_order=order, schema=target)
        t = ctx.table(name)
        df = t if df is None else df.union(t)
    assert df is not None
    if region is not None:
        df = df.filter(region_filter(region))
    df = df.sort(*[col(n).sort(ascending=True, nulls_first=False) for n in schema.key_names])
    for b in df.execute_stream():
        rb = b.to_pyarrow()
        if rb.schema != target:
            rb = pa.Table.from_batches([rb]).cast(target).combine_chunks().to_batches()[0]
        yield rb


def explain_merge(paths: Sequence[str], schema: Schema) -> str:
    """The physical plan of a merge, to check it has no full sort."""
    from datafusion import col

    ctx = _session(len(paths), 8192)
    order = [[col(n).sort(ascending=True, nulls_first=False) for n in schema.key_names]]
    df = None
    for i, p in enumerate(paths):
        ctx.register_parquet(f"input_{i}", p, file_sort_order=order, schema=arrow_schema(schema))
        t = ctx.table(f"input_{i}")
        df = t if df is None else df.union(t)
    assert df is not None
    df = df.sort(*[col(n).sort(ascending=True, nulls_first=False) for n in schema.key_names])
    return str(df.execution_plan().display_indent())
