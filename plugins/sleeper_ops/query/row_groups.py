"""Which row groups of its file a query task reads.

The footer's statistics give the row groups whose key range meets the task's range on
the first row key field (a binary search of the file's cached row group index). For an
exact key, each of those row groups' Bloom filter is probed too
(:meth:`~sleeper_ops.io.datafile.ParquetFileCache.may_hold`), and only those that may
hold the key are read: in a leaf of several files, each spanning the leaf's key range,
about one file is read instead of every one (docs/adr/0022). On S3 only the filters the
footer's one read brought are probed (a probe of its own would be a ranged GET, one more
round trip than the read it saves).
"""

from __future__ import annotations

from typing import Optional, Sequence

import pyarrow.parquet as pq

from sleeper_ops.engine.key_regions import only_value
from sleeper_ops.io.datafile import ParquetFileCache
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.query.tasks import Task

#: a task, its file's footer and the row groups of the file to read (:func:`locate`)
Located = tuple[Task, pq.FileMetaData, list[int]]


def row_groups(cache: ParquetFileCache, objects: ObjectStore, first_type: str,
               task: Task) -> tuple[pq.FileMetaData, list[int]]:
    """The footer of ``task``'s file and the row groups that may hold rows of the task
    (``first_type``: the type of the table's first row key field). The cost does not
    grow with the file; a file with no usable index (no statistics, or not sorted) has
    every group's statistics scanned instead, and no filter probed."""
    first = task.region.ranges[0]
    md, index = cache.row_group_index(objects, task.ref.filename, first.field)
    if index is not None:
        candidates = index.groups(first.min, first.max)
        value = only_value(first_type, first) if candidates else None
        if value is None:
            return md, list(candidates)
        return md, cache.may_hold(objects, task.ref.filename, md, index, candidates, value)
    col_idx = md.schema.to_arrow_schema().get_field_index(first.field)
    groups = []
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(col_idx).statistics
        if st is not None and st.has_min_max:
            if st.max < first.min or (first.max is not None and st.min >= first.max):
                continue
        groups.append(i)
    return md, groups


def locate(cache: ParquetFileCache, objects: ObjectStore, first_type: str,
           tasks: Sequence[Task]) -> Optional[list[Located]]:
    """From a local store, for two or more tasks: each task with its file's footer and
    the row groups to read (:func:`row_groups`), found in the caller's thread, the tasks
    with none left out; else None (each task finds its own where it is read). Finding
    them costs a few microseconds a file (the footer cached, a binary search, a filter
    probe), less than handing a task to a pool thread (about 0.2 ms): an exact key held
    by one of a leaf's files is then read as a key of a one-file leaf is."""
    if len(tasks) < 2 or not objects.is_local:
        return None
    located = []
    for task in tasks:
        md, groups = row_groups(cache, objects, first_type, task)
        if groups:
            located.append((task, md, groups))
    return located
