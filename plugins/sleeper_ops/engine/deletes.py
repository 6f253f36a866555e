"""Applying tombstones (:mod:`statestore.deletes`) to rows: which tombstones cover a
source, which rows they match, and the SQL predicate check.

A row matches a tombstone when its key is in one of the tombstone's regions and the
tombstone's predicate (an SQL expression over any fields, evaluated by DataFusion) is
true for it; a predicate that is false or NULL keeps the row. Every reader (query, SQL,
the Spark reader, REST) and every writer that rewrites data (flush, compaction) goes
through :func:`without_deleted`, so all apply one rule.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from sleeper_ops.engine import kernels
from sleeper_ops.engine.leaves import region_mask
from sleeper_ops.errors import QueryError
from sleeper_ops.io.arrow_schema import arrow_schema, empty_table
from sleeper_ops.io.pandas_free import load_datafusion
from statestore.deletes import Tombstone
from statestore.schema import Schema, min_value


class DeleteInputError(QueryError):
    """A delete (or an erasure report) asked for something that cannot be deleted: an
    empty or inverted range, no key, or a predicate that does not parse or names an
    unknown field."""


def covering_file(tombstones: Iterable[Tombstone], delete_horizon: int) -> tuple[Tombstone, ...]:
    """The tombstones that apply to a file reference of ``delete_horizon``."""
    return tuple(t for t in tombstones if t.covers_file(delete_horizon))


def covering_entry(tombstones: Iterable[Tombstone], seq: int) -> tuple[Tombstone, ...]:
    """The tombstones that apply to the write buffer entry numbered ``seq``."""
    return tuple(t for t in tombstones if t.covers_buffer_entry(seq))


def check_where(schema: Schema, where: Optional[str]) -> Optional[str]:
    """``where`` if it is an SQL predicate over the table's fields; raises
    :class:`DeleteInputError` in one line otherwise (None and blank give None)."""
    if where is None or not where.strip():
        return None
    try:
        load_datafusion()
        from datafusion import SessionContext

        df = SessionContext().from_arrow(empty_table(arrow_schema(schema)))
        df.select(df.parse_sql_expr(where).alias("m")).schema()
    except Exception as e:  # DataFusion raises plain Exception with its message
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DeleteInputError(f"--where {where!r} is not a predicate over the table's fields: "
                               f"{reason.removeprefix('DataFusion error: ')}") from None
    return where


def matches(batch: pa.RecordBatch | pa.Table, tombstone: Tombstone) -> pa.Array:
    """True for each row of ``batch`` the tombstone matches (see the module docstring)."""
    mask: Any = None
    for region in tombstone.regions:
        m = region_mask(batch, region)
        mask = m if mask is None else kernels.or_(mask, m)
    if mask is None:
        return pa.array([False] * batch.num_rows)
    if tombstone.where is None or not kernels.call_function("any", [mask]).as_py():
        return mask
    load_datafusion()
    from datafusion import SessionContext

    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    df = SessionContext().from_arrow(table.combine_chunks())
    where = df.select(df.parse_sql_expr(f"COALESCE(({tombstone.where}), false)").alias("m")).to_arrow_table()
    return kernels.and_(mask, where.column("m"))


def without_deleted(batch: Any, tombstones: Sequence[Tombstone]) -> Any:
    """``batch`` (a Table or RecordBatch) without the rows any of ``tombstones`` match."""
    if not tombstones or not batch.num_rows:
        return batch
    hit: Any = None
    for t in tombstones:
        m = matches(batch, t)
        hit = m if hit is None else kernels.or_(hit, m)
    return kernels.filter_rows(batch, kernels.invert(hit))


def filter_batches(batches: Iterable[pa.RecordBatch], tombstones: Sequence[Tombstone]) -> Iterator[pa.RecordBatch]:
    """Each batch without the rows ``tombstones`` match (empty batches left out)."""
    for b in batches:
        kept = without_deleted(b, tombstones)
        if kept.num_rows:
            yield kept


def key_bounds(metadata: pq.FileMetaData, field: str) -> Optional[tuple[Any, Any]]:
    """The least and greatest value of ``field`` in a Parquet file, from its row group
    statistics (None when a group has none, or the file has no rows)."""
    names = metadata.schema.to_arrow_schema().names
    if field not in names or metadata.num_row_groups == 0:
        return None
    idx = names.index(field)
    lo = hi = None
    for i in range(metadata.num_row_groups):
        st = metadata.row_group(i).column(idx).statistics
        if st is None or not st.has_min_max:
            return None
        lo = st.min if lo is None or st.min < lo else lo
        hi = st.max if hi is None or st.max > hi else hi
    return lo, hi


def covers_whole(tombstones: Sequence[Tombstone], schema: Schema, bounds: Optional[tuple[Any, Any]]) -> bool:
    """Whether some tombstone without a predicate matches every row of a file whose first
    row key field lies within ``bounds`` (its other key fields unrestricted)."""
    if bounds is None:
        return False
    lo, hi = bounds
    for t in tombstones:
        if t.where is not None:
            continue
        for region in t.regions:
            first, rest = region.ranges[0], region.ranges[1:]
            if (all(r.max is None and r.min == min_value(f.type)  # type: ignore[arg-type]
                    for r, f in zip(rest, schema.row_key_fields[1:]))
                    and _le(first.min, lo) and (first.max is None or _lt(hi, first.max))):
                return True
    return False


def _le(a: Any, b: Any) -> bool:
    try:
        return bool(a <= b)
    except TypeError:
        return False


def _lt(a: Any, b: Any) -> bool:
    try:
        return bool(a < b)
    except TypeError:
        return False
