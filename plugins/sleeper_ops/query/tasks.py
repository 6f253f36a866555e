"""A query's plan: the tasks that read each file reference's rows of the queried
regions, planned on a table's metadata copy (:class:`~sleeper_ops.query.metadata.TableMetadata`).

A task names everything its read depends on: the file, the region read from it, the
earlier regions whose rows other tasks return, and the tombstones that hide rows of
it. Data files never change, so two tasks equal in these read the same rows
(:func:`reads_of`), whatever state of the table planned them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pyarrow as pa

from sleeper_ops.engine.deletes import covering_file
from sleeper_ops.query.metadata import TableMetadata
from statestore.deletes import Tombstone
from statestore.files import FileReference
from statestore.region import Range, Region


def intersect(a: Region, b: Region) -> Optional[Region]:
    """The region both ``a`` and ``b`` cover (None: they do not meet)."""
    out = []
    for x, y in zip(a.ranges, b.ranges):
        lo = max(x.min, y.min)
        hi = x.max if y.max is None else (y.max if x.max is None else min(x.max, y.max))
        if hi is not None and hi <= lo:
            return None
        out.append(Range(x.field, lo, hi))
    return Region(tuple(out))


@dataclass(frozen=True)
class Task:
    """Read the rows of one file reference inside ``region`` and none of ``exclude``, less
    those ``deletes`` hide."""

    ref: FileReference
    region: Region  # query region ∩ partition region
    exclude: tuple[Region, ...] = ()  # earlier query regions: their rows are returned by their own tasks
    deletes: tuple[Tombstone, ...] = ()  # tombstones covering the file whose regions meet the task's


class Tasks(list[Task]):
    """A query's tasks, and the table's live tombstones and write buffer mark in the
    state they were planned on."""

    def __init__(self, tombstones: tuple[Tombstone, ...], buffer_mark: Optional[tuple[int, int, int]]) -> None:
        super().__init__()
        self.tombstones = tombstones
        self.buffer_mark = buffer_mark


def tasks_on(meta: TableMetadata, disjoint: list[Region]) -> Tasks:
    """The tasks of the ``disjoint`` regions on ``meta``, with its live tombstones and
    write buffer mark."""
    live = tuple(meta.tombstones[n] for n in sorted(meta.tombstones))
    tasks = Tasks(live, meta.buffer_mark)
    for i, region in enumerate(disjoint):
        exclude = tuple(r for r in disjoint[:i] if r.overlaps(region))
        tasks.extend(region_tasks(meta, region, exclude, live))
    return tasks


def reads_of(task: Task) -> tuple[Any, ...]:
    """All that a task's read depends on (its reference's counts and job do not)."""
    return task.ref.filename, task.region, task.exclude, task.deletes


def region_tasks(meta: TableMetadata, region: Region, exclude: tuple[Region, ...],
                 live: tuple[Tombstone, ...]) -> list[Task]:
    """One task per file reference of a partition overlapping ``region`` (leaves and
    their ancestors), reading the reference's rows in ``region`` less ``exclude``,
    with the tombstones of ``live`` that hide rows of it."""
    tasks = []
    for part in meta.overlapping(region):
        refs = meta.references_in(part.id)
        if not refs:
            continue
        inter = intersect(region, part.region)
        if inter is None:
            continue
        near = tuple(t for t in live if any(r.overlaps(inter) for r in t.regions))
        for ref in refs:
            tasks.append(Task(ref, inter, exclude, covering_file(near, ref.delete_horizon)))
    return tasks


@dataclass(frozen=True)
class LeafTasks:
    """One leaf of a :meth:`QueryRunner.leaf_plan`: its part of the planned region, the
    tasks reading its files, and the write buffer's records in it (None: none).
    Plain data (picklable): a Spark task can read a leaf planned on the driver."""

    leaf_id: str
    region: Region
    tasks: tuple[Task, ...]
    buffered: Optional[pa.Table] = None


@dataclass(frozen=True)
class LeafPlan:
    """The leaves of one :meth:`QueryRunner.leaf_plan`, in key order, and the table's
    live tombstones in the state they were planned on."""

    leaves: tuple[LeafTasks, ...]
    tombstones: tuple[Tombstone, ...]


def disjoint_regions(regions: Sequence[Region]) -> list[Region]:
    """Merge overlapping single-dimension ranges so no record is returned twice."""
    if not regions:
        return []
    if len(regions[0].ranges) == 1:
        rs = sorted(regions, key=lambda r: r.ranges[0].min)
        out = [rs[0]]
        for r in rs[1:]:
            last = out[-1].ranges[0]
            cur = r.ranges[0]
            if last.max is None or cur.min <= last.max:
                hi = None if last.max is None or cur.max is None else max(last.max, cur.max)
                out[-1] = Region((Range(last.field, last.min, hi),))
            else:
                out.append(r)
        return out
    uniq: list[Region] = []
    for r in regions:
        if r not in uniq:
            uniq.append(r)
    return uniq
