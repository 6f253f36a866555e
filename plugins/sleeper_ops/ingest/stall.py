"""An ingest waits while compaction is behind (a write stall), so lookups stay fast.

A key lookup reads every file referenced from the key's leaf partition and from that
leaf's ancestors (references a split has not pushed down yet). Each ingest adds a
reference to every leaf it spans; only compaction takes them away. When ingest outruns
the compaction runners (on 2 cores, ``bench/scale.py`` ingesting at full speed reached
13.6 files a leaf and a warm exact-key p50 of 13 ms at 216 M rows, against 2 files a
leaf 28 s after ingest stopped), every lookup slows with the count.

With ``sleeper.table.ingest.max.files.per.leaf`` = N (0, the default: never wait) an
ingest checks, before it reads any input, whether some leaf holds more than N such
references. While one does it waits, reading the table's overview again every
:data:`POLL_SECONDS`, and goes on as soon as none does. After
``sleeper.table.ingest.max.files.wait.seconds`` it gives up with
:class:`~sleeper_ops.errors.IngestStalledError`, naming the table, the leaf and both
settings; it has then read no input and written nothing. RocksDB stops writes the same
way when its first level holds too many files (``level0_stop_writes_trigger``).

Compaction must be running for the wait to end: the table's compaction DAG, or
``sleeper compact``. Its job creation gives a leaf over the limit a job even where the
table's strategy would wait (:func:`sleeper_ops.compaction.strategy.over_ingest_limit`),
so every such leaf has a way down.

The wait comes after the ingest's job record is saved and before its delete count and
partitions are read: deletes committed while it waits cover its records.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Optional

from sleeper_ops.errors import IngestStalledError
from statestore.catalog import TableInfo
from statestore.overview import TableOverview
from statestore.properties import INGEST_MAX_FILES_PER_LEAF, INGEST_MAX_FILES_WAIT_SECONDS
from statestore.store import StateStore

log = logging.getLogger(__name__)

#: seconds between two reads of the table's overview while an ingest waits
POLL_SECONDS = 1.0
#: seconds between two log lines of one wait
LOG_EVERY_SECONDS = 30.0


@dataclass(frozen=True)
class Fullest:
    """The leaf whose lookups read the most files, and how many."""

    leaf_id: str
    files: int


def fullest_leaf(overview: TableOverview) -> Optional[Fullest]:
    """The leaf with the most file references of its own and of its ancestors (the files
    a lookup of a key in it reads), from the table's overview (per-partition counts; the
    PostgreSQL store sums them in the database); None for a table without partitions."""
    tree = overview.tree()
    best: Optional[Fullest] = None
    for leaf in tree.leaves():
        files = overview.count(leaf.id).files + sum(overview.count(a.id).files for a in tree.ancestors(leaf.id))
        if best is None or files > best.files or (files == best.files and leaf.id < best.leaf_id):
            best = Fullest(leaf.id, files)
    return best


def wait_for_compaction(store: StateStore, table: TableInfo) -> float:
    """Wait while some leaf of ``table`` holds more file references than the table's
    ``sleeper.table.ingest.max.files.per.leaf`` (0: return at once), reading its overview
    every :data:`POLL_SECONDS`; the seconds waited.
    Raises IngestStalledError once the wait passes ``sleeper.table.ingest.max.files.wait.seconds``."""
    limit = table.get_int(INGEST_MAX_FILES_PER_LEAF)
    if limit <= 0:
        return 0.0
    most = table.get_int(INGEST_MAX_FILES_WAIT_SECONDS)
    start = time.monotonic()
    logged: Optional[float] = None
    while True:
        fullest = fullest_leaf(store.overview(table.table_id, file_limit=0))
        if fullest is None or fullest.files <= limit:
            if logged is None:  # no leaf over the limit at the first look: no wait
                return 0.0
            waited = time.monotonic() - start
            log.info("table %s: ingest goes on after waiting %.1f s for compaction", table.name, waited)
            return waited
        waited = time.monotonic() - start
        if waited >= most:
            raise IngestStalledError(
                f"table {table.name}: leaf {fullest.leaf_id} still holds {fullest.files} files after {waited:.0f} s "
                f"(more than {INGEST_MAX_FILES_PER_LEAF} = {limit}; {INGEST_MAX_FILES_WAIT_SECONDS} = {most}): "
                "is compaction running? Nothing was read or written")
        if logged is None or time.monotonic() - logged >= LOG_EVERY_SECONDS:
            log.warning("table %s: ingest waits for compaction: leaf %s holds %d files, more than %s = %d "
                        "(waited %.0f s of at most %d)", table.name, fullest.leaf_id, fullest.files,
                        INGEST_MAX_FILES_PER_LEAF, limit, waited, most)
            logged = time.monotonic()
        time.sleep(min(POLL_SECONDS, max(0.0, most - waited)))
