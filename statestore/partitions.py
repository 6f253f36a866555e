"""Partitions and the partition tree.

Partitions form a tree whose root covers the whole key space. A split turns a leaf
into a parent of two leaves that divide its region at a split point on one row key
dimension. Leaves never overlap and together cover the key space.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Iterable, Optional, Sequence

from statestore.codec import Record, key
from statestore.errors import PartitionError, SchemaError
from statestore.region import Range, Region
from statestore.schema import Schema, check_key_value, min_value

ROOT_ID = "root"


@dataclass(frozen=True)
class Partition(Record):
    """One node of the partition tree.

    Invariants: a leaf has no children and ``dimension == -1``; a non-leaf has exactly
    two children whose regions split this region on ``dimension``. Written as
    ``{"id", "parent", "children", "leaf", "dimension", "region"}``.
    """

    CODEC_ORDER: ClassVar[tuple[str, ...]] = ("id", "parent_id", "child_ids", "is_leaf", "dimension", "region")
    id: str
    region: Region
    parent_id: Optional[str] = field(default=None, metadata=key("parent"))
    child_ids: tuple[str, ...] = field(default=(), metadata=key("children"))
    is_leaf: bool = field(default=True, metadata=key("leaf"))
    dimension: int = -1


def root_region(schema: Schema) -> Region:
    return Region(tuple(Range(f.name, min_value(f.type), None) for f in schema.row_key_fields))  # type: ignore[arg-type]


def split_children(parent: Partition, dimension: int, split_point: Any,
                   left_id: Optional[str] = None,
                   right_id: Optional[str] = None) -> tuple[Partition, Partition, Partition]:
    """Return (new parent, left child, right child) for splitting ``parent``.

    Raises PartitionError if ``parent`` is not a leaf or the split point is not
    strictly inside the parent's range on ``dimension``.
    """
    if not parent.is_leaf:
        raise PartitionError(f"partition {parent.id} is already split")
    if not 0 <= dimension < len(parent.region.ranges):
        raise PartitionError(f"partition {parent.id}: no row key dimension {dimension}")
    r = parent.region.ranges[dimension]
    if not (r.min < split_point and (r.max is None or split_point < r.max)):
        raise PartitionError(f"partition {parent.id}: split point {split_point!r} is not inside [{r.min!r}, {r.max!r})")
    left_id = left_id or str(uuid.uuid4())
    right_id = right_id or str(uuid.uuid4())
    left = Partition(left_id, parent.region.with_range(dimension, Range(r.field, r.min, split_point)), parent.id)
    right = Partition(right_id, parent.region.with_range(dimension, Range(r.field, split_point, r.max)), parent.id)
    new_parent = replace(parent, child_ids=(left_id, right_id), is_leaf=False, dimension=dimension)
    return new_parent, left, right


def partitions_from_split_points(schema: Schema, split_points: Sequence[Any] = ()) -> list[Partition]:
    """Build a balanced tree whose leaves are divided at ``split_points`` on the first row key.

    Split points must be of the first row key's type, distinct and are sorted here.
    The root has id ``root``; other ids are fresh UUIDs.
    """
    first = schema.row_key_fields[0]
    points = [check_key_value(first.type, p, first.name) for p in split_points]  # type: ignore[arg-type]
    points.sort()
    for a, b in zip(points, points[1:]):
        if a == b:
            raise SchemaError(f"split point {a!r} is given twice")
    if points and points[0] == min_value(first.type):  # type: ignore[arg-type]
        raise SchemaError(
            f"split point {points[0]!r} is the least value of {first.type}; it would leave an empty partition")
    out: list[Partition] = []

    def build(p: Partition, pts: list[Any]) -> None:
        if not pts:
            out.append(p)
            return
        mid = len(pts) // 2
        parent, left, right = split_children(p, 0, pts[mid])
        out.append(parent)
        build(left, pts[:mid])
        build(right, pts[mid + 1:])

    build(Partition(ROOT_ID, root_region(schema)), points)
    return out


class PartitionTree:
    """Read-only navigation over a set of partitions."""

    def __init__(self, partitions: Iterable[Partition]):
        self.by_id = {p.id: p for p in partitions}
        roots = [p for p in self.by_id.values() if p.parent_id is None]
        self.root = roots[0] if roots else None

    def leaves(self) -> list[Partition]:
        return [p for p in self.by_id.values() if p.is_leaf]

    def ancestors(self, partition_id: str) -> list[Partition]:
        """Parent, grandparent, ... up to the root."""
        out = []
        p = self.by_id[partition_id]
        while p.parent_id is not None:
            p = self.by_id[p.parent_id]
            out.append(p)
        return out

    def leaf_for_key(self, key: Sequence[Any]) -> Partition:
        assert self.root is not None
        p = self.root
        while not p.is_leaf:
            left = self.by_id[p.child_ids[0]]
            p = left if left.region.ranges[p.dimension].contains(key[p.dimension]) else self.by_id[p.child_ids[1]]
        return p

    def leaves_overlapping(self, region: Region) -> list[Partition]:
        return [p for p in self.leaves() if p.region.overlaps(region)]

    def depth_first(self) -> list[tuple[int, Partition]]:
        """(depth, partition) in depth-first order, left child first."""
        out: list[tuple[int, Partition]] = []
        if self.root is None:
            return out
        stack = [(0, self.root)]
        while stack:
            d, p = stack.pop()
            out.append((d, p))
            for c in reversed(p.child_ids):
                stack.append((d + 1, self.by_id[c]))
        return out
