"""Pre-splitting before a bulk import, as Sleeper does: a table with fewer leaf
partitions than ``sleeper.table.bulk.import.min.leaf.partitions`` is split first, at
medians of a sample of the input's first row key field, so the import's files land
spread over enough leaves (and enough Spark tasks).

Each split is an ordinary committed :class:`~statestore.transactions.SplitPartition`
(recorded as a ``split`` job); no data is rewritten.
"""

from __future__ import annotations

import bisect
from typing import Any, Optional, Sequence

from sleeper_ops.io.inputs import read_batches
from sleeper_ops.io.storage import S3Options
from sleeper_ops.maintenance.splitting import SplitPoint, split_partition
from statestore.catalog import TableInfo
from statestore.errors import PartitionError
from statestore.partitions import Partition, PartitionTree
from statestore.store import StateStore

MIN_LEAVES_PROPERTY = "sleeper.table.bulk.import.min.leaf.partitions"
SAMPLE_ROWS = 200_000


def sample_keys(files: Sequence[str], table: TableInfo, s3: Optional[S3Options] = None,
                rows: int = SAMPLE_ROWS) -> list[Any]:
    """Sorted values of the first row key field from the start of each file (about
    ``rows`` in all, spread evenly over the files)."""
    field = table.schema.row_key_fields[0].name
    per_file = max(1, rows // max(1, len(files)))
    values: list[Any] = []
    for path in files:
        got = 0
        for batch in read_batches(path, table.schema, s3, batch_rows=min(per_file, 65_536)):
            column = batch.column(field).slice(0, per_file - got)
            values.extend(v for v in column.to_pylist() if v is not None)
            got += len(column)
            if got >= per_file:
                break
    return sorted(values)


def _median_in(leaf: Partition, values: list[Any]) -> Optional[Any]:
    """A split value for ``leaf`` from the sorted sample: its median within the leaf's
    range, moved up past the range's minimum; None if the sample cannot split it."""
    r = leaf.region.ranges[0]
    lo = bisect.bisect_left(values, r.min) if r.min is not None else 0
    hi = bisect.bisect_left(values, r.max) if r.max is not None else len(values)
    if hi - lo < 2:
        return None
    i = lo + (hi - lo) // 2
    while i < hi and (r.min is not None and values[i] <= r.min):
        i += 1
    if i >= hi or values[i] == values[lo] and values[lo] == values[hi - 1]:
        return None
    return values[i]


def presplit(state_store: StateStore, table: TableInfo, files: Sequence[str], *, s3: Optional[S3Options] = None,
             min_leaves: Optional[int] = None, run_id: Optional[str] = None) -> int:
    """Split the table's leaves, fullest first by the sample, until it has at least
    ``min_leaves`` (default: the table's property) or the sample cannot split any
    more; returns how many splits were committed. A split refused because the table
    changed concurrently is skipped."""
    want = table.get_int(MIN_LEAVES_PROPERTY) if min_leaves is None else min_leaves
    tree = PartitionTree(state_store.partitions(table.table_id))
    leaves = [p for p in tree.by_id.values() if p.is_leaf]
    if len(leaves) >= want:
        return 0
    values = sample_keys(files, table, s3)
    field = table.schema.row_key_fields[0].name
    done = 0
    stuck: set[str] = set()
    while len(leaves) < want:
        def weight(p: Partition) -> int:
            r = p.region.ranges[0]
            lo = bisect.bisect_left(values, r.min) if r.min is not None else 0
            hi = bisect.bisect_left(values, r.max) if r.max is not None else len(values)
            return hi - lo
        candidates = sorted((p for p in leaves if p.id not in stuck), key=weight, reverse=True)
        if not candidates:
            break
        leaf = candidates[0]
        value = _median_in(leaf, values)
        if value is None:
            stuck.add(leaf.id)
            continue
        try:
            split = split_partition(state_store, table, leaf, SplitPoint(0, field, value), run_id=run_id)
        except PartitionError:
            stuck.add(leaf.id)
            continue
        done += 1
        parts = {p.id: p for p in state_store.partitions(table.table_id)}
        leaves = [p for p in leaves if p.id != leaf.id] + [parts[c] for c in split.child_ids]
    return done

