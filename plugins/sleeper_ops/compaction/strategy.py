"""Compaction strategies: which files of a leaf partition to merge together.

A strategy sees the references of one leaf partition that are not assigned to a
job and returns groups of them, each group one compaction job. Groups never share
a reference and hold at most ``batch_size`` files; a group always has at least two
files (merging one file with nothing gains nothing).

* ``basic``: the partition's references in batches of ``batch_size``, oldest first;
  a last batch smaller than that is still a job when it has two files or more.
* ``sizeratio`` (the default, as Sleeper's): references by record count, smallest
  first. From the smallest, take the largest group of up to ``batch_size`` files in
  which ``ratio * largest <= sum of the group``, i.e. no file dominates the others;
  if no such group of two or more exists from the smallest file, drop the smallest
  file and try again from the next. Files of similar size are merged once there are
  ``ratio`` of them; a big file waits until the smaller ones add up to it.

Whatever the strategy, a leaf holding more files than
``sleeper.table.ingest.max.files.per.leaf`` (when set) with none in a running job gets
a job of its smallest files when the strategy makes none (:func:`over_ingest_limit`):
ingest waits for such a leaf, so it must always have a way down.
"""

from __future__ import annotations

from typing import Callable, Sequence

from statestore.catalog import TableInfo
from statestore.files import FileReference
from statestore.properties import (
    COMPACTION_FILES_BATCH_SIZE,
    COMPACTION_STRATEGY,
    COMPACTION_STRATEGY_SIZERATIO_RATIO,
    INGEST_MAX_FILES_PER_LEAF,
)

Strategy = Callable[[Sequence[FileReference], int, int], list[list[FileReference]]]


def basic(refs: Sequence[FileReference], batch_size: int, ratio: int = 0) -> list[list[FileReference]]:
    ordered = sorted(refs, key=lambda r: (r.update_time, r.filename))
    groups = [list(ordered[i:i + batch_size]) for i in range(0, len(ordered), batch_size)]
    return [g for g in groups if len(g) >= 2]


def size_ratio(refs: Sequence[FileReference], batch_size: int, ratio: int) -> list[list[FileReference]]:
    remaining = sorted(refs, key=lambda r: (r.record_count, r.filename))
    groups: list[list[FileReference]] = []
    while len(remaining) >= 2:
        group = _largest_balanced_prefix(remaining, batch_size, ratio)
        if group:
            groups.append(group)
            remaining = remaining[len(group):]
        else:
            remaining = remaining[1:]
    return groups


def _largest_balanced_prefix(refs: Sequence[FileReference], batch_size: int,
                             ratio: int) -> list[FileReference]:
    best: list[FileReference] = []
    total = 0
    for n, r in enumerate(refs[:batch_size], start=1):
        total += r.record_count
        # refs are sorted ascending, so r is the largest of the first n.
        if n >= 2 and ratio * r.record_count <= total:
            best = list(refs[:n])
    return best


STRATEGIES: dict[str, Strategy] = {"basic": basic, "sizeratio": size_ratio}


def plan_groups(table: TableInfo, refs: Sequence[FileReference], assigned: int = 0) -> list[list[FileReference]]:
    """The groups the table's strategy makes of one leaf partition's unassigned
    references (``assigned`` more of the leaf's are in running jobs); when it makes none
    and the leaf holds more files than ingest allows, :func:`over_ingest_limit`'s group."""
    strategy = STRATEGIES[strategy_name(table)]
    groups = strategy(refs, table.get_int(COMPACTION_FILES_BATCH_SIZE),
                      table.get_int(COMPACTION_STRATEGY_SIZERATIO_RATIO))
    if not groups:
        forced = over_ingest_limit(table, refs, assigned)
        groups = [forced] if forced else []
    return groups


def over_ingest_limit(table: TableInfo, refs: Sequence[FileReference], assigned: int = 0) -> list[FileReference]:
    """The smallest of a leaf's unassigned references whose merge brings the leaf to one
    file under ``sleeper.table.ingest.max.files.per.leaf`` (N), when it holds more than N
    and no job is running on it; else none. Ingests wait while a leaf holds more than N
    files (:mod:`sleeper_ops.ingest.stall`), so a leaf the strategy leaves alone (under
    ``sizeratio``, files that never add up to the larger ones: 1, 2, 4, 8, ... records)
    would hold every ingest up until it gives up. At most ``batch_size`` files; at least 2."""
    limit = table.get_int(INGEST_MAX_FILES_PER_LEAF)
    if limit <= 0 or assigned or len(refs) <= limit:
        return []
    take = min(len(refs), table.get_int(COMPACTION_FILES_BATCH_SIZE), max(2, len(refs) - limit + 2))
    return sorted(refs, key=lambda r: (r.record_count, r.filename))[:take]


def why_no_job(table: TableInfo, unassigned: Sequence[FileReference], assigned: int = 0) -> str:
    """Why the table's strategy makes no job of a leaf's ``unassigned`` references (for
    which :func:`plan_groups` returned none), ``assigned`` other references of the leaf
    being in jobs already; e.g. ``4 files (10, 40, 200, 900 records): sizeratio merges 2
    to 12 files, smallest first, once 3 x the largest is at most their total; none do yet``."""
    busy = f"; {assigned} more in running jobs" if assigned else ""
    n = len(unassigned)
    if n == 0:
        return f"every file ({assigned}) is in a running job"
    if n == 1:
        return f"1 file, nothing to merge it with{busy}"
    name = strategy_name(table)
    if name != "sizeratio":  # basic makes a job of any two files
        return f"{n} files, no job planned by {name}{busy}"
    counts = sorted(r.record_count for r in unassigned)
    shown = ", ".join(f"{c:,}" for c in counts[:6]) + (", ..." if n > 6 else "")
    batch = table.get_int(COMPACTION_FILES_BATCH_SIZE)
    ratio = table.get_int(COMPACTION_STRATEGY_SIZERATIO_RATIO)
    return (f"{n} files ({shown} records): sizeratio merges 2 to {batch} files, smallest first, once "
            f"{ratio} x the largest is at most their total; none do yet (smaller files must add up to the "
            f"larger){busy}")


def strategy_name(table: TableInfo) -> str:
    """The table's ``sleeper.table.compaction.strategy`` (default ``sizeratio``)."""
    return table.get(COMPACTION_STRATEGY) or "sizeratio"
