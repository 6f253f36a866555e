"""The query path's long-lived copy of a table's metadata, refreshed incrementally.

:class:`TableMetadata` keeps one table's partition tree, file references and catalog
entry. Before every use (:meth:`TableMetadata.plan`) it catches up with
:meth:`StateStore.changes_since <statestore.store.StateStore.changes_since>`, which
returns only what changed since its last read (one small round trip when nothing did),
so a query's metadata cost does not grow with the number of partitions or files.

Guarantees:

* **Read-your-writes.** A plan sees every commit that returned before
  :meth:`~TableMetadata.plan` was called, and the catalog entry (properties, name) as
  of then. There is no time-to-live: nothing older than the call is ever used.
* **Consistent.** A plan sees one consistent state of the table (one read of the store).
* **Thread-safe.** Any number of threads may plan at once. Refreshes take turns, and a
  caller whose call began before a refresh that has just finished started reuses it
  instead of reading again, so concurrent queries share round trips.
* **Bounded in time.** A plan is taken when a query starts; the files it names stay
  readable for the table's GC delay (``sleeper.table.gc.delay.minutes``) after they lose
  their references, which bounds how long a query may keep reading them. Nothing here
  keeps a reference alive longer: the copy is brought up to date on every use.

Planning walks down the partition tree from the root, visiting only partitions whose
region overlaps the query, so it costs the depth of the tree, not its size.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Optional, TypeVar

from statestore.catalog import TableInfo
from statestore.changes import TableChanges
from statestore.deletes import Tombstone
from statestore.files import FileReference
from statestore.partitions import Partition
from statestore.region import Region
from statestore.roles import TableCommits

T = TypeVar("T")


class TableMetadata:
    """One table's partitions, references and catalog entry, kept up to date (see the
    module docstring). Read them only inside :meth:`plan`."""

    def __init__(self, state_store: TableCommits, table_id: str) -> None:
        self.state_store, self.table_id = state_store, table_id
        self._lock = threading.Lock()
        self._clock = itertools.count()  # orders calls and refresh starts
        self._fresh_from = -1  # the clock reading when the last refresh began
        self._token: Any = None
        self.table: Optional[TableInfo] = None
        self.partitions: dict[str, Partition] = {}
        self.references: dict[str, dict[str, FileReference]] = {}  # partition id -> filename -> reference
        self._partitions_of_file: dict[str, set[str]] = {}
        self._root: Optional[Partition] = None
        #: the table's live tombstones by number (:mod:`statestore.deletes`)
        self.tombstones: dict[int, Tombstone] = {}
        #: the write buffer's mark read with the metadata (:attr:`TableChanges.buffer_mark`; None:
        #: the last answer did not say)
        self.buffer_mark: Optional[tuple[int, int, int]] = None
        #: reads of the state store so far, and how many answered with the whole state
        self.refreshes = 0
        self.full_loads = 0

    def plan(self, fn: Callable[[TableMetadata], T]) -> T:
        """``fn(self)`` over metadata brought up to date (see the module docstring),
        with the copy held still while ``fn`` runs. Raises the state store's errors
        (TableNotFoundError once the table is deleted)."""
        arrived = next(self._clock)
        with self._lock:
            if self._fresh_from <= arrived:
                began = next(self._clock)
                self._apply(self.state_store.changes_since(self.table_id, self._token))
                self._fresh_from = began
            return fn(self)

    def guess(self, fn: Callable[[TableMetadata], T]) -> Optional[T]:
        """``fn(self)`` over the copy as it stands, without asking the state store: a
        guess at what :meth:`plan` will see, for work that may start before the plan's
        round trip ends and must be checked against it. None when there is no copy yet,
        or a refresh is under way in another thread (this never waits for one)."""
        if self._token is None or not self._lock.acquire(blocking=False):
            return None
        try:
            return fn(self)
        finally:
            self._lock.release()

    def _apply(self, ch: TableChanges) -> None:
        self.refreshes += 1
        self.table = ch.table
        self.buffer_mark = ch.buffer_mark
        if ch.tombstones is not None:
            self.tombstones = {t.number: t for t in ch.tombstones}
        if ch.unchanged:
            self._token = ch.token
            return
        if ch.full:
            self.full_loads += 1
            self.partitions, self.references, self._partitions_of_file = {}, {}, {}
        for pid in ch.partition_ids:
            self.partitions.pop(pid, None)
        for p in ch.partitions:
            self.partitions[p.id] = p
        for name in ch.filenames:
            for pid in self._partitions_of_file.pop(name, ()):
                refs = self.references.get(pid)
                if refs is not None:
                    refs.pop(name, None)
                    if not refs:
                        del self.references[pid]
        for r in ch.references:
            self.references.setdefault(r.partition_id, {})[r.filename] = r
            self._partitions_of_file.setdefault(r.filename, set()).add(r.partition_id)
        if ch.full or ch.partition_ids:
            roots = [p for p in self.partitions.values() if p.parent_id is None]
            self._root = roots[0] if roots else None
        self._token = ch.token

    # ----- reading, inside plan() ------------------------------------------------------
    def overlapping(self, region: Region) -> list[Partition]:
        """The leaf partitions overlapping ``region`` and all their ancestors, parents
        before children, found by walking down from the root."""
        out: list[Partition] = []
        stack = [self._root] if self._root is not None else []
        while stack:
            p = stack.pop()
            if not p.region.overlaps(region):
                continue
            out.append(p)
            stack.extend(self.partitions[c] for c in reversed(p.child_ids))
        return out

    def references_in(self, partition_id: str) -> list[FileReference]:
        """The references of one partition."""
        refs = self.references.get(partition_id)
        return list(refs.values()) if refs else []
