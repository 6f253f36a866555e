"""Pre-splitting before a bulk import: a table with fewer leaf partitions than the
import needs is split first, so the import's files land spread over enough leaves
(and enough Spark tasks). Each split is an ordinary committed
:class:`~statestore.transactions.SplitPartition` (recorded as a ``split`` job); no data
is rewritten.

How many leaves an import needs (:func:`planned_leaves`): ``want`` =
``sleeper.table.bulk.import.min.leaf.partitions`` for an empty table, and in general
``want`` times the import's share of the records the table will hold (rounded): a
5,000-row import into a 100,000-row table needs ``round(64 * 5/105) = 3`` leaves, so a
table that already has 3 gets none. Never more leaves than the table's records after
the import divided by ``sleeper.table.bulk.import.min.rows.per.leaf`` (at least one):
with the default 1,000,000, an import of 100, 10,000 or 1 M rows into a new table
splits nothing, 10 M rows make 10 leaves and 100 M rows 64.

Where to split: at weighted medians of the whole table after the import, that is the
table's own key distribution (the merged sketches of its files, each file weighted by
its records) together with a sample of the new data's first row key field. The
fullest leaf is split first. :func:`plan_split_points` is the planning, a pure
function; :func:`presplit` reads the inputs and commits the plan.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pyarrow.parquet as pq

from sleeper_ops.engine.separators import separator
from sleeper_ops.io.datafile import read_sketches
from sleeper_ops.io.inputs import detect_format, read_batches, resolve
from sleeper_ops.io.sketches import merged_field_sketch
from sleeper_ops.io.storage import ObjectStore, S3Options
from sleeper_ops.maintenance.splitting import SplitPoint, split_partition
from statestore.catalog import TableInfo
from statestore.errors import PartitionError
from statestore.partitions import PartitionTree
from statestore.properties import BULK_IMPORT_MIN_LEAF_PARTITIONS, BULK_IMPORT_MIN_ROWS_PER_LEAF
from statestore.roles import TableCommits
from statestore.store import StateStore

SAMPLE_ROWS = 200_000
#: Points taken from the table's merged sketch to stand for its existing records.
TABLE_POINTS = 2_000
#: Most file sketches read for the table's distribution (the files with most records).
MAX_SKETCH_FILES = 256


@dataclass(frozen=True)
class NewDataSample:
    """Sorted first-row-key values from the start of the input files, and the
    (estimated) number of records the files hold."""

    values: list[Any]
    records: int


def sample_keys(files: Sequence[str], table: TableInfo, s3: Optional[S3Options] = None,
                rows: int = SAMPLE_ROWS) -> NewDataSample:
    """About ``rows`` values of the first row key field from the start of the files
    (spread evenly over them). The record count is exact for files read to their end
    and for Parquet files (from the footer); a CSV or JSON Lines file read in part
    counts its sampled rows only."""
    field = table.schema.row_key_fields[0].name
    per_file = max(1, rows // max(1, len(files)))
    values: list[Any] = []
    records = 0
    for path in files:
        got, ended = 0, True
        for batch in read_batches(path, table.schema, s3, batch_rows=min(per_file, 65_536), table=table.name):
            column = batch.column(field).slice(0, per_file - got)
            values.extend(v for v in column.to_pylist() if v is not None)
            got += len(column)
            if got >= per_file:
                ended = False
                break
        records += got if ended else _record_count(path, s3, got)
    return NewDataSample(sorted(values), records)


def _record_count(path: str, s3: Optional[S3Options], at_least: int) -> int:
    if detect_format(path) != "parquet":
        return at_least
    fs, p = resolve(path, s3)
    with fs.open_input_file(p) as f:
        return max(at_least, pq.ParquetFile(f).metadata.num_rows)


def leaves_needed(want: int, existing: int, new: int) -> int:
    """Leaves the import needs: ``want`` times its share of the records after it, rounded
    (at least 1)."""
    if new <= 0:
        return 1
    return max(1, round(want * new / (existing + new)))


def planned_leaves(want: int, min_rows: int, existing: int, new: int) -> int:
    """The leaves a table of ``existing`` records should have after importing ``new``:
    :func:`leaves_needed`, but no more than ``(existing + new) // min_rows`` (at least
    1), so no leaf is made for fewer than ``min_rows`` records."""
    return max(1, min(leaves_needed(want, existing, new), (existing + new) // max(1, min_rows)))


Bound = tuple[Any, Optional[Any]]  # [min, max) of the first row key field; max None: unbounded


def plan_split_points(leaves: Sequence[Bound], weighted: Sequence[tuple[Any, float]], want: int) -> list[Any]:
    """Split values, in order, that bring ``leaves`` up to ``want`` leaves: each splits
    the then fullest leaf (by the weights of ``weighted``, sorted (value, weight) pairs
    standing for the records) at its weighted median. Stops early when no leaf holding
    weight can be split (its values are all equal, or at its minimum). A split value is
    the shortest between the sampled value below the median and the median
    (:func:`~sleeper_ops.engine.separators.separator`), so a string key stays in the
    partition tree only as a prefix where a prefix separates."""
    values = [v for v, _ in weighted]
    cumulative = [0.0]
    for _, w in weighted:
        cumulative.append(cumulative[-1] + w)

    def span(b: Bound) -> tuple[int, int]:
        lo, hi = b
        return (bisect.bisect_left(values, lo) if lo is not None else 0,
                bisect.bisect_left(values, hi) if hi is not None else len(values))

    def weight(b: Bound) -> float:
        i, j = span(b)
        return cumulative[j] - cumulative[i]

    def median(b: Bound) -> Optional[Any]:
        i, j = span(b)
        if j - i < 2:
            return None
        half = (cumulative[i] + cumulative[j]) / 2
        k = min(bisect.bisect_left(cumulative, half, i + 1, j), j - 1)  # values[i:k] weigh about half
        while k < j and values[k] == values[i]:  # keys below the split value: the left half is not empty
            k += 1
        if k >= j:
            return None
        below = values[bisect.bisect_left(values, values[k]) - 1]  # the greatest value below it (values[i] at least)
        return separator(below, values[k])  # not a record's key where a shorter value lies between (engine.separators)

    bounds = list(leaves)
    stuck: set[Bound] = set()
    out: list[Any] = []
    while len(bounds) < want:
        candidates = [b for b in bounds if b not in stuck and weight(b) > 0]
        if not candidates:
            break
        leaf = max(candidates, key=weight)
        value = median(leaf)
        if value is None:
            stuck.add(leaf)
            continue
        out.append(value)
        bounds.remove(leaf)
        bounds += [(leaf[0], value), (value, leaf[1])]
    return out


def table_distribution(state_store: TableCommits, objects: ObjectStore, table: TableInfo,
                       points: int = TABLE_POINTS) -> tuple[list[tuple[Any, float]], int]:
    """The table's first-row-key distribution as ``points`` (value, records) pairs from
    the merged sketches of its files (the :data:`MAX_SKETCH_FILES` with most records,
    each sketch weighted by its file's records), and the table's record count."""
    state = state_store.load_state(table.table_id)
    per_file: dict[str, int] = {}
    for ref in state.references.values():
        per_file[ref.filename] = per_file.get(ref.filename, 0) + ref.record_count
    total = sum(per_file.values())
    if not total:
        return [], 0
    field = table.schema.row_key_fields[0]
    chosen = sorted(per_file, key=lambda f: (-per_file[f], f))[:MAX_SKETCH_FILES]
    sketches = [read_sketches(objects, table.schema, f).fields[field.name] for f in chosen]
    merged = merged_field_sketch(field.type, sketches)  # type: ignore[arg-type]
    each = total / points
    out = []
    for i in range(points):
        v = merged.quantile((i + 0.5) / points)
        if v is not None:
            out.append((v, each))
    return out, total


def presplit(state_store: StateStore, objects: ObjectStore, table: TableInfo, files: Sequence[str], *,
             s3: Optional[S3Options] = None, min_leaves: Optional[int] = None, run_id: Optional[str] = None) -> int:
    """Split the table's leaves as the module docstring says, ``min_leaves`` standing for
    the table's property; returns how many splits were committed. A split refused
    because the table changed concurrently is skipped."""
    want = table.get_int(BULK_IMPORT_MIN_LEAF_PARTITIONS) if min_leaves is None else min_leaves
    min_rows = table.get_int(BULK_IMPORT_MIN_ROWS_PER_LEAF)
    tree = PartitionTree(state_store.partitions(table.table_id))
    leaves = [p for p in tree.by_id.values() if p.is_leaf]
    if len(leaves) >= want:
        return 0
    sample = sample_keys(files, table, s3)
    existing, records = table_distribution(state_store, objects, table)
    need = planned_leaves(want, min_rows, records, sample.records)
    if len(leaves) >= need or not sample.values:
        return 0
    each = sample.records / len(sample.values)
    weighted = sorted(existing + [(v, each) for v in sample.values], key=lambda p: p[0])
    bounds = [(p.region.ranges[0].min, p.region.ranges[0].max) for p in leaves]
    field = table.schema.row_key_fields[0].name
    done = 0
    for value in plan_split_points(bounds, weighted, need):
        tree = PartitionTree(state_store.partitions(table.table_id))
        leaf = next((p for p in tree.by_id.values() if p.is_leaf and p.region.ranges[0].contains(value)), None)
        if leaf is None:
            continue
        try:
            split_partition(state_store, table, leaf, SplitPoint(0, field, value), run_id=run_id)
        except PartitionError:
            continue
        done += 1
    return done
