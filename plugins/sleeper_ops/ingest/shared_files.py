"""An ingest chunk written as a few sorted files shared by the leaves they span.

A chunk sorted by key (:func:`sleeper_ops.engine.key_order.sorted_leaf_slices`) is one
run of rows per leaf partition, leaves in key order. Rather than one data file and one
sketch sidecar per leaf (32 objects for an append over 16 leaves), the leaves are cut
into at most ``files`` contiguous groups of about equal rows, and each group is written
as one sorted file, each leaf's rows in row groups of their own (no row group holds two
leaves' rows), with one sketch sidecar for the whole file. The file is referenced from
every leaf it spans, with that leaf's exact record count; a reference is ``whole_file``
only when the file holds one leaf's rows.

This is the model a partition split already uses (one file referenced from two
partitions), so every reader of a reference reads only its partition's rows: queries
intersect the partition's region and find its row groups from the footer's statistics,
a compaction of the leaf merges only its region, a split restricts the file's sketch to
the partition's range, and the garbage collector deletes a file only once no partition
references it. The groups are written in parallel, one per thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sleeper_ops.engine.key_order import rows_at
from sleeper_ops.io.datafile import DataFileWriter, ParquetSettings, WrittenFile
from sleeper_ops.io.storage import ObjectStore
from statestore.files import FileReference
from statestore.partitions import Partition
from statestore.schema import Schema

#: the fewest rows worth a file of their own: a chunk of fewer rows than this times the
#: files asked for is written as fewer files (a small append is one file, one object)
MIN_FILE_ROWS = 65_536


@dataclass(frozen=True)
class LeafRun:
    """One leaf's rows of a sorted chunk: ``order[start:end]``."""

    leaf: Partition
    start: int
    end: int

    @property
    def rows(self) -> int:
        return self.end - self.start


def leaf_groups(slices: list[tuple[Partition, int, int]], files: int) -> list[list[LeafRun]]:
    """``slices`` (leaves in key order, their rows contiguous) cut into at most ``files``
    contiguous groups of about equal rows, never an empty one; fewer when the chunk has
    under :data:`MIN_FILE_ROWS` rows a file."""
    runs = [LeafRun(leaf, a, b) for leaf, a, b in slices if b > a]
    if not runs:
        return []
    total = sum(r.rows for r in runs)
    files = max(1, min(files, len(runs), total // MIN_FILE_ROWS))
    groups: list[list[LeafRun]] = [[]]
    done = 0
    for run in runs:
        # start the next group once this one has its share (rows before the run's middle)
        if groups[-1] and len(groups) < files and done + run.rows / 2 > total * len(groups) / files:
            groups.append([])
        groups[-1].append(run)
        done += run.rows
    return groups


def take_group(table: pa.Table, order: np.ndarray, group: list[LeafRun]) -> pa.Table:
    """``group``'s rows of ``table`` in key order (contiguous in ``order``): one take of
    every column."""
    return rows_at(table, order[group[0].start:group[-1].end])


def write_group(objects: ObjectStore, key: str, schema: Schema, settings: ParquetSettings, rows: pa.Table,
                group: list[LeafRun]) -> WrittenFile:
    """Write ``rows`` (:func:`take_group`'s) to ``key`` with its sidecar, each leaf's rows
    in row groups of their own; nothing is left behind on failure."""
    first = group[0].start
    w = DataFileWriter(objects, key, schema, settings)
    try:
        for run in group:
            w.write(rows.slice(run.start - first, run.rows))
            w.end_row_group()
        return w.close()
    except BaseException:
        w.abort()
        raise


@dataclass(frozen=True)
class IngestOutput:
    """One data file an ingest wrote, and the leaves it holds rows of with their counts."""

    file: WrittenFile
    leaves: tuple[tuple[str, int], ...]  # (leaf partition id, its records in the file), in key order

    @classmethod
    def of_leaf(cls, leaf_id: str, file: WrittenFile) -> IngestOutput:
        return cls(file, ((leaf_id, file.record_count),))

    @classmethod
    def of_group(cls, file: WrittenFile, group: list[LeafRun]) -> IngestOutput:
        return cls(file, tuple((run.leaf.id, run.rows) for run in group))

    def references(self, delete_horizon: int) -> list[FileReference]:
        """The file's reference from each of its leaves, with that leaf's exact count
        (``whole_file`` when it holds one leaf's rows only)."""
        whole = len(self.leaves) == 1
        return [FileReference(self.file.key, pid, n, whole_file=whole, delete_horizon=delete_horizon)
                for pid, n in self.leaves]
