"""Streaming sort-preserving merge of sorted Parquet files, in DataFusion.

The inputs' sort order is declared to DataFusion, one scan per file, and repartition
of scans and sorts is off, so the plan is a ``SortPreservingMergeExec`` over the
files with no ``SortExec``: memory stays bounded by a few batches per input however
large the inputs grow. An optional region filter keeps only the rows of one
partition. Batches come back with the table's Arrow schema.

The merge runs in a background thread (DataFusion releases the GIL), at most a few
batches ahead of its consumer, so merging the next rows overlaps whatever the
caller does with the last ones (typically Parquet encoding): with two free cores a
compaction takes about as long as the slower of the two, not their sum.

:func:`merge_sorted_to_file` instead has DataFusion write the merged rows to one
Parquet file itself, decoding, merging and encoding row groups and columns on every
core, with no batch crossing into Python (only the row key columns, when asked for,
to build sketches beside the write): for merges whose rows need no Python (no
iterators).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Generator, Iterator, Optional, Sequence

import pyarrow as pa

from sleeper_ops.engine.key_regions import exact_key_of
from sleeper_ops.io.arrow_schema import arrow_schema
from sleeper_ops.io.pandas_free import load_datafusion
from statestore.deletes import Tombstone
from statestore.region import Region
from statestore.schema import Schema


def _session(n_inputs: int, batch_size: int) -> Any:
    load_datafusion()
    from datafusion import SessionConfig, SessionContext

    cfg = (SessionConfig()
           .with_target_partitions(max(2, n_inputs))
           .with_repartition_file_scans(False)
           .with_repartition_sorts(False)
           .with_batch_size(batch_size)
           .set("datafusion.execution.parquet.schema_force_view_types", "false")
           .set("datafusion.execution.parquet.pushdown_filters", "false")
           .set("datafusion.optimizer.enable_round_robin_repartition", "false"))
    return SessionContext(cfg)


def region_filter(region: Region) -> Any:
    """A DataFusion predicate selecting the rows inside ``region``."""
    load_datafusion()
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
                 batch_size: int = 16384, read_ahead: int = 4,
                 deletes: Sequence[Sequence[Tombstone]] = ()) -> Generator[pa.RecordBatch, None, None]:
    """Yield the rows of the sorted Parquet (or Arrow IPC, ``.arrow``) files at ``paths``
    in key order.

    ``paths`` are local paths, or URLs under ``store_url`` when a DataFusion
    ``object_store`` is given (e.g. ``AmazonS3``). Batches hold at most
    ``batch_size`` rows. With ``read_ahead`` > 0 the merge runs in a background
    thread at most that many batches ahead of the consumer: an error in the merge
    is raised to the consumer, and closing the generator early stops the thread
    (after the batch it is merging). ``read_ahead=0`` merges in the consumer's thread.
    ``deletes``: for each input, the tombstones whose rows are dropped from it (a
    filter on that input's scan, which keeps its order).
    """
    if not paths:
        return
    ctx = _session(len(paths), batch_size)
    if object_store is not None:
        assert store_url is not None, "an object store comes with its URL"
        scheme, _, host = store_url.partition("://")  # e.g. "s3://bucket" -> ("s3://", "bucket")
        ctx.register_object_store(f"{scheme}://", object_store, host.split("/", 1)[0] or None)
    target = arrow_schema(schema)

    def batches() -> Iterator[pa.RecordBatch]:
        for b in _merged_frame(ctx, paths, schema, region, deletes).execute_stream():
            rb = b.to_pyarrow()
            if rb.schema != target:
                rb = pa.Table.from_batches([rb]).cast(target).combine_chunks().to_batches()[0]
            yield rb
    if read_ahead <= 0:
        yield from batches()
    else:
        yield from _ahead(batches(), read_ahead)


def merge_sorted_to_file(paths: Sequence[str], schema: Schema, output: str, options: Any, *,
                         region: Optional[Region] = None, deletes: Sequence[Sequence[Tombstone]] = (),
                         on_keys: Optional[Callable[[pa.RecordBatch], None]] = None,
                         object_store: Any = None, store_url: Optional[str] = None,
                         batch_size: int = 16384) -> None:
    """Write the rows of the sorted Parquet files at ``paths``, merged in key order, to
    one Parquet file at ``output`` (a local path, or a URL under ``store_url`` with
    ``object_store``, as for :func:`merge_sorted`), with DataFusion's
    ``ParquetWriterOptions`` ``options``. ``region`` and ``deletes`` select the rows as
    for :func:`merge_sorted`, so the file holds exactly the rows that would yield, in
    the same order. ``on_keys``, if given, is called with the row key columns of every
    batch written, in order, on a thread of its own while DataFusion goes on writing
    (see :class:`_KeyTee`); an error it raises is raised here once the write ends. On
    failure part of ``output`` may exist."""
    load_datafusion()
    from datafusion import DataFrameWriteOptions

    if not paths:
        raise ValueError("a merge into a file needs at least one input")
    ctx = _session(len(paths), batch_size)
    if object_store is not None:
        assert store_url is not None, "an object store comes with its URL"
        scheme, _, host = store_url.partition("://")
        ctx.register_object_store(f"{scheme}://", object_store, host.split("/", 1)[0] or None)
    frame = _merged_frame(ctx, paths, schema, region, deletes)
    if on_keys is None:
        frame.write_parquet_with_options(output, options, DataFrameWriteOptions(single_file_output=True))
        return
    with _KeyTee(schema, on_keys) as tee:
        tee.observing(frame).write_parquet_with_options(output, options, DataFrameWriteOptions(single_file_output=True))


#: a LIMIT no merge reaches: DataFusion pushes no filter below a limit (see _KeyTee)
_NO_LIMIT = 2**62


class _KeyTee:
    """Sees the row key columns of every merged batch on their way to DataFusion's writer
    and hands them, in order, to ``on_keys`` on a thread of its own.

    A volatile UDF filter that keeps every row observes the key columns. It is put above
    a LIMIT no merge reaches so that DataFusion cannot push it below the merge into the
    scans: it then runs once per merged batch, in order, from the one task feeding the
    writer, and sees exactly the rows written (after the region and delete filters). The
    UDF only queues the batch (at most ``depth`` waiting, so memory stays bounded);
    ``on_keys`` runs on the tee's thread, beside the merge and the encoders. An error in
    ``on_keys`` is kept (later batches are dropped, so DataFusion never waits on a dead
    consumer) and raised when the tee closes; an error in the write stops the thread.
    """

    def __init__(self, schema: Schema, on_keys: Callable[[pa.RecordBatch], None], depth: int = 8):
        target = arrow_schema(schema)
        self.names = list(schema.row_key_names)
        self.types = [target.field(n).type for n in self.names]
        self.on_keys = on_keys
        self._queue: queue.Queue[Any] = queue.Queue(depth)
        self._error: Optional[BaseException] = None
        self._all_true: dict[int, pa.Array] = {}
        self._thread = threading.Thread(target=self._consume, name="merge-key-tee", daemon=True)

    def observing(self, frame: Any) -> Any:
        """``frame`` with the observing filter on top."""
        load_datafusion()
        from datafusion import col, udf

        observe = udf(self._observe, self.types, pa.bool_(), "volatile", "sleeper_observe_keys")
        return frame.limit(_NO_LIMIT).filter(observe(*[col(n) for n in self.names]))

    def _observe(self, *columns: pa.Array) -> pa.Array:
        self._queue.put(pa.RecordBatch.from_arrays(list(columns), names=self.names))
        n = len(columns[0])
        keep = self._all_true.get(n)
        if keep is None:
            keep = self._all_true[n] = pa.nulls(n, pa.bool_()).fill_null(True)
        return keep

    def _consume(self) -> None:
        while (batch := self._queue.get()) is not _END:
            if self._error is None:
                try:
                    self.on_keys(batch)
                except BaseException as e:  # kept for the writer's thread, which raises it
                    self._error = e

    def __enter__(self) -> _KeyTee:
        self._thread.start()
        return self

    def __exit__(self, kind: Optional[type[BaseException]], *_: Any) -> None:
        self._queue.put(_END)
        self._thread.join()
        if kind is None and self._error is not None:
            raise self._error


_END = object()


class _Failure:
    """An exception raised in the read-ahead thread, carried to the consumer."""

    def __init__(self, error: BaseException):
        self.error = error


def _ahead(items: Iterator[Any], depth: int) -> Iterator[Any]:
    """Yield ``items``, produced by a background thread at most ``depth`` items ahead."""
    q: queue.Queue[Any] = queue.Queue(depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_END)
        except BaseException as e:
            put(_Failure(e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="merge-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        worker.join()


def tombstone_filter(df: Any, tombstones: Sequence[Tombstone], schema: Schema) -> Any:
    """A DataFusion predicate over ``df``'s columns (of ``schema``) keeping the rows no
    tombstone matches (the rule of :mod:`sleeper_ops.engine.deletes`). A tombstone's exact
    keys (:func:`~sleeper_ops.engine.key_regions.exact_key_of`) become one
    ``IN`` list per field: a delete of thousands of keys as thousands of ORed ranges
    overflowed a DataFusion worker thread's stack (a segfault that killed the process)."""
    load_datafusion()
    from datafusion import col, lit
    from datafusion import functions as f

    hits = []
    for t in tombstones:
        exact: dict[str, list[Any]] = {}
        others = []
        for region in t.regions:
            one = exact_key_of(schema, region)
            if one is None:
                others.append(region_filter(region))
            else:
                exact.setdefault(one[0], []).append(one[1])
        ins = [f.in_list(col(name), [lit(v) for v in values]) for name, values in exact.items()]
        key = _any(ins + others)
        if key is None:
            continue
        if t.where is not None:
            key = key & f.coalesce(df.parse_sql_expr(f"({t.where})"), lit(False))
        hits.append(key)
    hit = _any(hits)
    return None if hit is None else ~hit


def _any(exprs: Sequence[Any]) -> Any:
    """The OR of ``exprs`` as a balanced tree (None for none): DataFusion walks an
    expression recursively on its worker threads' small stacks."""
    if not exprs:
        return None
    level = list(exprs)
    while len(level) > 1:
        level = [level[i] | level[i + 1] if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    return level[0]


def _merged_frame(ctx: Any, paths: Sequence[str], schema: Schema, region: Optional[Region] = None,
                  deletes: Sequence[Sequence[Tombstone]] = ()) -> Any:
    """A DataFrame of the files at ``paths`` (sort order declared), filtered and sorted by key."""
    load_datafusion()
    from datafusion import col

    def key_order() -> list[Any]:
        return [col(n).sort(ascending=True, nulls_first=False) for n in schema.key_names]
    df = None
    for i, p in enumerate(paths):
        if p.endswith(".arrow"):  # Arrow IPC: the order is declared through SQL, the only way for this format
            order = ", ".join(f'"{n}" ASC NULLS LAST' for n in schema.key_names)
            location = p.replace("'", "''")
            ctx.sql(f"CREATE EXTERNAL TABLE input_{i} STORED AS ARROW LOCATION '{location}' WITH ORDER ({order})")
        else:
            ctx.register_parquet(f"input_{i}", p, file_sort_order=[key_order()], schema=arrow_schema(schema))
        t = ctx.table(f"input_{i}")
        keep = tombstone_filter(t, deletes[i], schema) if i < len(deletes) and deletes[i] else None
        if keep is not None:
            t = t.filter(keep)
        df = t if df is None else df.union(t)
    assert df is not None
    if region is not None:
        df = df.filter(region_filter(region))
    return df.sort(*key_order())


def explain_merge(paths: Sequence[str], schema: Schema) -> str:
    """The physical plan of a merge, to check it has no full sort."""
    ctx = _session(len(paths), 8192)
    return str(_merged_frame(ctx, paths, schema).execution_plan().display_indent())
