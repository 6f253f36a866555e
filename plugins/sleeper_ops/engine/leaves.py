"""Vectorised assignment of rows to leaf partitions, and of rows to a region."""

from __future__ import annotations

import bisect
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa

from sleeper_ops.engine import kernels
from sleeper_ops.io.arrow_numpy import indices, to_numpy
from sleeper_ops.io.arrow_schema import key_scalar, sort_keys
from statestore.partitions import Partition, PartitionTree
from statestore.region import Range, Region
from statestore.schema import Schema

#: the most split points for which :func:`leaf_indices` compares every row with each
#: (beyond, it walks the tree, comparing each node's rows only)
MAX_FLAT_SPLITS = 32


def leaf_indices(table: pa.Table, tree: PartitionTree) -> list[tuple[Partition, Optional[np.ndarray]]]:
    """Row indices of ``table`` per leaf partition, ascending (``None``: every row).

    Leaves with no rows are left out. When every split of the tree is on one field and
    there are at most :data:`MAX_FLAT_SPLITS`, each row's leaf is the number of split
    points at or below its key (one vectorised comparison of the whole column per split
    point, then one stable sort of the leaf numbers); otherwise the tree is walked with
    one vectorised comparison per internal node on its split dimension.
    """
    assert tree.root is not None
    flat = _flat_splits(tree)
    if flat is not None and table.num_rows > 0:
        return _by_split_points(table, *flat)
    out: list[tuple[Partition, Optional[np.ndarray]]] = []
    stack: list[tuple[Partition, Optional[np.ndarray]]] = [(tree.root, None)]
    while stack:
        node, idx = stack.pop()
        n = table.num_rows if idx is None else len(idx)
        if n == 0:
            continue
        if node.is_leaf:
            out.append((node, idx))
            continue
        left = tree.by_id[node.child_ids[0]]
        right = tree.by_id[node.child_ids[1]]
        r = left.region.ranges[node.dimension]
        column = table.column(r.field)
        if idx is not None:
            column = column.take(indices(idx))
        mask = to_numpy(kernels.less(column, key_scalar(r.max, column.type)))
        base = np.arange(table.num_rows) if idx is None else idx
        stack.append((right, base[~mask]))
        stack.append((left, base[mask]))
    return out


def splits_along_one_dimension(tree: PartitionTree) -> Optional[tuple[int, str, list[Partition], list[object]]]:
    """(dimension, field, leaves in key order, split points) when every split of ``tree``
    is on one dimension (a tree of one leaf: dimension 0, no split points); else None."""
    internal = [p for p in tree.by_id.values() if not p.is_leaf]
    if len({p.dimension for p in internal}) > 1:
        return None
    dim = internal[0].dimension if internal else 0
    leaves = sorted((p for p in tree.by_id.values() if p.is_leaf), key=lambda p: p.region.ranges[dim].min)
    return dim, leaves[0].region.ranges[dim].field, leaves, [leaf.region.ranges[dim].min for leaf in leaves[1:]]


def _flat_splits(tree: PartitionTree) -> Optional[tuple[str, list[Partition], list[object]]]:
    """(field, leaves in key order, split points) when every split of ``tree`` is on one
    field and there are 1 to :data:`MAX_FLAT_SPLITS` of them; else None."""
    along = splits_along_one_dimension(tree)
    if along is None or not 1 <= len(along[3]) <= MAX_FLAT_SPLITS:
        return None
    return along[1:]


def _by_split_points(table: pa.Table, field: str, leaves: list[Partition],
                     points: list[object]) -> list[tuple[Partition, Optional[np.ndarray]]]:
    """:func:`leaf_indices` for leaves that are consecutive ranges of ``field`` split at
    ``points`` (ascending): a row at a split point belongs to the leaf it starts."""
    column = table.column(field)
    number = np.zeros(table.num_rows, dtype=np.uint8)  # a leaf's number: at most 33 (radix-sorted below)
    for point in points:
        number += to_numpy(kernels.greater_equal(column, key_scalar(point, column.type)))
    counts = np.bincount(number, minlength=len(leaves))
    if counts.max() == table.num_rows:
        return [(leaves[int(np.argmax(counts))], None)]
    order = np.argsort(number, kind="stable")  # each leaf's rows stay ascending
    ends = np.cumsum(counts)
    return [(leaf, order[end - n:end]) for leaf, n, end in zip(leaves, counts, ends) if n]


#: the fewest rows per slice worth a task of its own in :func:`leaf_indices_sliced`
MIN_SLICE_ROWS = 32_768
Mapper = Callable[[Callable[[tuple[int, int]], list[tuple[Partition, Optional[np.ndarray]]]],
                   Iterable[tuple[int, int]]], Iterator[list[tuple[Partition, Optional[np.ndarray]]]]]


def leaf_indices_sliced(table: pa.Table, tree: PartitionTree, slices: int,
                        map_: Mapper = map) -> list[tuple[Partition, Optional[np.ndarray]]]:
    """What :func:`leaf_indices` returns, computed over up to ``slices`` contiguous row
    slices of ``table`` through ``map_`` (an executor's ``map`` runs them in parallel:
    Arrow's comparisons and takes release the GIL), each leaf's indices ascending."""
    n = table.num_rows
    slices = max(1, min(slices, n // MIN_SLICE_ROWS))
    if slices == 1:
        return leaf_indices(table, tree)
    bounds = [n * i // slices for i in range(slices + 1)]
    spans = list(zip(bounds, bounds[1:]))
    parts = map_(lambda span: leaf_indices(table.slice(span[0], span[1] - span[0]), tree), spans)
    found: dict[str, tuple[Partition, list[np.ndarray]]] = {}
    for (lo, hi), part in zip(spans, parts):
        for leaf, idx in part:
            rows = np.arange(lo, hi) if idx is None else idx + lo
            found.setdefault(leaf.id, (leaf, []))[1].append(rows)
    if len(found) == 1:
        return [(next(iter(found.values()))[0], None)]
    return [(leaf, np.concatenate(rows)) for leaf, rows in found.values()]


def sorted_rows(table: pa.Table, idx: Optional[np.ndarray], schema: Schema) -> pa.Table:
    """Rows ``idx`` of ``table`` (``None``: every row) in ``schema``'s key order: the
    order comes from the key columns alone, and the full rows are taken once (taking a
    leaf's rows, then sorting them, copies every column twice)."""
    keys = table.select(schema.key_names)
    if idx is not None:
        keys = kernels.take(keys, indices(idx))
    order = to_numpy(kernels.sort_indices(keys, sort_keys(schema)))
    return kernels.take(table, indices(order if idx is None else idx[order]))


def sorted_slice(table: Any, r: Range) -> Any:
    """The rows of ``table`` (a Table or RecordBatch sorted on ``r.field``, as every data
    file is) inside the range ``r``: one zero-copy slice, its ends found by counting the
    rows below ``r.min`` and below ``r.max`` (:func:`rows_below`)."""
    c = table.column(r.field)
    start = rows_below(c, r.min)
    end = table.num_rows if r.max is None else rows_below(c, r.max)
    return table.slice(start, max(0, end - start))


#: the Python type of each key column type's values, for which :func:`rows_below` searches
_SEARCHABLE = {pa.int32(): int, pa.int64(): int, pa.string(): str, pa.binary(): bytes}


def rows_below(column: Any, value: Any) -> int:
    """How many values of ``column`` (sorted ascending, no nulls: a key column of a data
    file) are less than ``value``. For an int, string or binary column and a bound of its
    Python type, a binary search that reads about log2(rows) values (Python orders str by
    code point and bytes unsigned, as Arrow orders UTF-8 and binary); else Arrow counts
    the values below it (the search slices a 2,048-row group of string keys 2.5x faster)."""
    kind = _SEARCHABLE.get(column.type)
    if kind is not None and type(value) is kind:  # as query.stream's merge finds its bounds
        bound: Any = value
        return bisect.bisect_left(range(len(column)), bound, key=lambda i: column[i].as_py())
    return kernels.count_true(kernels.less(column, key_scalar(value, column.type)))


def region_mask(table: pa.Table | pa.RecordBatch, region: Region) -> pa.ChunkedArray:
    """True for each row of ``table`` inside ``region`` (every range: min inclusive,
    max exclusive, None unbounded)."""
    m = None
    for r in region.ranges:
        c = table.column(r.field)
        part = kernels.greater_equal(c, key_scalar(r.min, c.type))
        if r.max is not None:
            part = kernels.and_(part, kernels.less(c, key_scalar(r.max, c.type)))
        m = part if m is None else kernels.and_(m, part)
    return m
