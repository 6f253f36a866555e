"""Transactions on the partition tree: initialise it, split a leaf (atomic,
conditional on the parent still being a leaf)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from statestore.errors import PartitionError, TransactionError
from statestore.partitions import Partition
from statestore.region import Range
from statestore.state import TableState
from statestore.transactions.base import (
    Touches,
    Transaction,
    require_partition,
)


@dataclass(frozen=True)
class InitialisePartitions(Transaction):
    """Replace the whole partition tree. Refused while the table has any files."""

    TYPE: ClassVar[str] = "initialise_partitions"
    partitions: tuple[Partition, ...]

    def touches(self) -> Touches:
        return Touches(whole_table=True)

    def validate(self, state: TableState) -> None:
        if state.files:
            raise TransactionError(f"cannot initialise partitions: the table has {len(state.files)} files")
        ids = [p.id for p in self.partitions]
        if len(set(ids)) != len(ids):
            raise PartitionError("initialise partitions: partition ids are not unique")
        roots = [p for p in self.partitions if p.parent_id is None]
        if len(roots) != 1:
            raise PartitionError(f"initialise partitions: expected one root, got {len(roots)}")
        by_id = {p.id: p for p in self.partitions}
        for p in self.partitions:
            if p.parent_id is not None and p.id not in by_id.get(p.parent_id, p).child_ids:
                raise PartitionError(f"partition {p.id} is not a child of its parent {p.parent_id}")
            if p.is_leaf != (not p.child_ids):
                raise PartitionError(f"partition {p.id}: leaf flag disagrees with its children")
            for c in p.child_ids:
                if c not in by_id:
                    raise PartitionError(f"partition {p.id} names a missing child {c}")

    def apply(self, state: TableState) -> None:
        state.partitions = {p.id: p for p in self.partitions}


@dataclass(frozen=True)
class SplitPartition(Transaction):
    """Split a leaf into two children, atomically; refused if it is no longer a leaf."""

    TYPE: ClassVar[str] = "split_partition"
    parent: Partition
    left: Partition
    right: Partition

    def touches(self) -> Touches:
        return Touches(partition_ids=frozenset({self.parent.id, self.left.id, self.right.id}))

    def validate(self, state: TableState) -> None:
        current = require_partition(state, self.parent.id)
        if not current.is_leaf:
            raise PartitionError(f"partition {self.parent.id} is already split")
        if current.region != self.parent.region or current.parent_id != self.parent.parent_id:
            raise PartitionError(f"partition {self.parent.id} has changed since the split was planned")
        if self.parent.is_leaf or self.parent.child_ids != (self.left.id, self.right.id):
            raise PartitionError(f"split of {self.parent.id}: the new parent must name both children")
        if self.left.id == self.right.id:
            raise PartitionError(f"split of {self.parent.id}: both children have id {self.left.id}")
        for c in (self.left, self.right):
            if c.id in state.partitions:
                raise PartitionError(f"split of {self.parent.id}: partition {c.id} already exists")
            if c.parent_id != self.parent.id or not c.is_leaf or c.child_ids:
                raise PartitionError(f"split of {self.parent.id}: child {c.id} must be a leaf under it")
        self._validate_regions(current)

    def _validate_regions(self, current: Partition) -> None:
        """The children must divide the parent's region at one point on its dimension."""
        d, ranges = self.parent.dimension, current.region.ranges
        bad = PartitionError(f"split of {self.parent.id}: the children do not divide its region on dimension {d}")
        if not 0 <= d < len(ranges) or len(self.left.region.ranges) != len(ranges):
            raise bad
        r = ranges[d]
        point = self.left.region.ranges[d].max
        try:
            inside = point is not None and r.min < point and (r.max is None or point < r.max)
        except TypeError:  # a point of the wrong type
            inside = False
        if (not inside or self.left.region != current.region.with_range(d, Range(r.field, r.min, point))
                or self.right.region != current.region.with_range(d, Range(r.field, point, r.max))):
            raise bad

    def apply(self, state: TableState) -> None:
        for p in (self.parent, self.left, self.right):
            state.partitions[p.id] = p
