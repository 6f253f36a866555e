"""How much of a data file the age-off iterator has expired, from Parquet statistics.

The age-off iterator (``sleeper.table.iterator.ageoff`` = ``FIELD:MAX_AGE_MS``, see
:class:`~sleeper_ops.engine.iterators.AgeOff`) hides a record whose ``FIELD`` is below
``now - MAX_AGE_MS`` (the *cutoff*); a null ``FIELD`` never expires. Reads apply it, but
only compaction removes the records, so a table with no new writes would keep them.
This module tells, per file, what a clock-driven age-off may do:

* :attr:`Expiry.whole`: every record has expired. Exact, from the row group statistics
  of ``FIELD``: every group has a maximum below the cutoff and no nulls. Garbage
  collection drops such a file's references without reading it
  (:mod:`sleeper_ops.maintenance.ageoff`).
* :attr:`Expiry.at_least` / :attr:`Expiry.at_most`: bounds on the expired records.
  A group whose maximum is below the cutoff counts its non-null rows in both; a group
  whose minimum is at or past the cutoff counts in neither; any other group (and any
  group without statistics) counts its non-null rows in ``at_most`` only. When the
  bounds do not settle a question (:func:`expired_fraction_over`), the column alone is
  read and counted exactly. So what is claimed is exact: a file is rewritten only when
  more than the fraction of its rows have expired.

The footers come from the query path's cache (:data:`~sleeper_ops.io.datafile.FILE_CACHE`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sleeper_ops.engine.iterators import AgeOff
from sleeper_ops.io.datafile import FILE_CACHE, ParquetFileCache
from sleeper_ops.io.storage import ObjectStore
from statestore.catalog import TableInfo
from statestore.properties import ITERATOR_AGEOFF


@dataclass(frozen=True)
class Expiry:
    """One file's expired records at a cutoff: bounds from statistics (see the module docstring)."""

    rows: int
    at_least: int
    at_most: int

    @property
    def whole(self) -> bool:
        """Every record has expired (and the file holds some)."""
        return self.rows > 0 and self.at_least == self.rows


def table_ageoff(table: TableInfo) -> AgeOff | None:
    """The table's age-off iterator, or None when it has none."""
    value = table.properties.get(ITERATOR_AGEOFF)
    return AgeOff.parse(value, table.schema) if value else None


def cutoff_ms(ageoff: AgeOff, now_ms: int) -> int:
    """Records whose age-off field is below this have expired at ``now_ms``."""
    return now_ms - ageoff.max_age_ms


def file_expiry(objects: ObjectStore, key: str, ageoff: AgeOff, cutoff: int,
                cache: ParquetFileCache | None = None) -> Expiry:
    """The bounds on ``key``'s expired records at ``cutoff``, from its footer alone."""
    md = (cache or FILE_CACHE or ParquetFileCache()).metadata(objects, key)
    names = md.schema.to_arrow_schema().names
    if ageoff.field not in names:
        return Expiry(md.num_rows, 0, 0)
    col = names.index(ageoff.field)
    low = high = 0
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        st = rg.column(col).statistics
        nulls = st.null_count if st is not None and st.has_null_count else rg.num_rows
        non_null = rg.num_rows - nulls
        if st is None or not st.has_min_max:
            high += non_null if st is not None and st.has_null_count else rg.num_rows
            continue
        if st.max < cutoff:
            low += non_null
            high += non_null
        elif st.min < cutoff:
            high += non_null
    return Expiry(md.num_rows, low, high)


def expired_rows(objects: ObjectStore, key: str, ageoff: AgeOff, cutoff: int) -> int:
    """The exact number of ``key``'s records expired at ``cutoff`` (reads that column only)."""
    with objects.open_input(key) as f:
        column = pq.ParquetFile(f, pre_buffer=False).read(columns=[ageoff.field]).column(0)
    return int(pc.sum(pc.less(column.cast(pa.int64()), pa.scalar(cutoff, pa.int64())).cast(pa.int64())).as_py() or 0)


def expired_fraction_over(objects: ObjectStore, key: str, ageoff: AgeOff, cutoff: int, fraction: float,
                          cache: ParquetFileCache | None = None) -> bool:
    """Whether more than ``fraction`` of ``key``'s records have expired at ``cutoff``:
    from the statistics when their bounds decide it, else by counting the column."""
    e = file_expiry(objects, key, ageoff, cutoff, cache)
    if e.rows == 0:
        return False
    if e.at_least > fraction * e.rows:
        return True
    if e.at_most <= fraction * e.rows:
        return False
    return expired_rows(objects, key, ageoff, cutoff) > fraction * e.rows
