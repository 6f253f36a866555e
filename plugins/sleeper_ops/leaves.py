"""Vectorised assignment of sorted rows to leaf partitions."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestore.partitions import Partition, PartitionTree


def split_by_leaf(table: pa.Table, tree: PartitionTree) -> list[tuple[Partition, pa.Table]]:
    """Split rows into one table per leaf partition, each keeping the input's row order.

    Leaves with no rows are left out. Walks the tree once per level with vectorised
    comparisons on each node's split dimension.
    """
    assert tree.root is not None
    out: list[tuple[Partition, pa.Table]] = []
    stack: list[tuple[Partition, np.ndarray | None]] = [(tree.root, None)]  # None = all rows
    while stack:
        node, idx = stack.pop()
        n = table.num_rows if idx is None else len(idx)
        if n == 0:
            continue
        if node.is_leaf:
            out.append((node, table if idx is None else table.take(pa.array(idx))))
            continue
        left = tree.by_id[node.child_ids[0]]
        right = tree.by_id[node.child_ids[1]]
        r = left.region.ranges[node.dimension]
        column = table.column(r.field)
        if idx is not None:
            column = column.take(pa.array(idx))
        mask = pc.less(column, pa.scalar(r.max, column.type)).to_numpy(zero_copy_only=False)
        base = np.arange(table.num_rows) if idx is None else idx
        stack.append((right, base[~mask]))
        stack.append((left, base[mask]))
    return out
