"""The write buffer as a source of query rows (read-your-writes, DESIGN.md section 3).

:class:`BufferedRows` keeps, per table, the decoded records of the buffer entries it has
seen, sorted in key order; each query asks the state store for the current list of
entries and the bytes of only the entries it has not seen
(``read_buffer(skip_data=...)``), so a query with a large but unchanged buffer reads a
list of numbers, not the records again.

Consistency with the files: a query plans on the table's metadata, then reads the
buffer. A flush that committed in between would have moved records from the buffer into
a file the plan does not hold. Every buffer read returns the table's flush count; the
count seen by the previous read, taken before this query's metadata refresh, bounds the
count at the refresh. If the count read now differs, the query plans again (rare: only
when a flush commits during a query). So every query sees each record once: in a file
or in the buffer.

Every backend keeps a write buffer (PostgreSQL rows, DynamoDB items, the in-memory store's
dict), so every query reads one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa

from sleeper_ops.engine import kernels
from sleeper_ops.engine.deletes import covering_entry, without_deleted
from sleeper_ops.engine.leaves import region_mask
from sleeper_ops.io.arrow_schema import arrow_schema, empty_table, sort_keys
from statestore.changes import buffer_mark
from statestore.deletes import Tombstone
from statestore.errors import NotSupportedError
from statestore.region import Region
from statestore.roles import WriteBuffer
from statestore.schema import Schema


@dataclass(frozen=True)
class SortedRows:
    """Buffered records in key order, with their first row key field as a NumPy array
    for binary search (Python values: strings and bytes compare as the table orders them)."""

    table: pa.Table
    first: Any

    @classmethod
    def of(cls, table: pa.Table, field: str) -> SortedRows:
        return cls(table, _key_values(table.column(field)))


def _key_values(column: pa.ChunkedArray) -> Any:
    """A key column (no nulls) as a NumPy array: integers without a copy, strings and
    bytes as Python objects. (pyarrow's ``to_numpy`` imports pandas, half a second of a
    new process's first query.)"""
    import numpy as np

    if column.num_chunks == 0:
        return np.empty(0, dtype=object)
    arr = column.chunk(0) if column.num_chunks == 1 else pa.concat_arrays(column.chunks)
    if pa.types.is_integer(arr.type) and arr.null_count == 0:
        kind = "int" if pa.types.is_signed_integer(arr.type) else "uint"
        dtype = np.dtype(f"{kind}{arr.type.bit_width}")
        return np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset:arr.offset + len(arr)]
    return np.array(arr.to_pylist(), dtype=object)


class BufferedRows:
    """The decoded, key-sorted records of one table's write buffer (see the module
    docstring). Thread-safe."""

    def __init__(self, state_store: WriteBuffer, table_id: str, schema: Schema) -> None:
        self.state_store, self.table_id, self.schema = state_store, table_id, schema
        self.target = arrow_schema(schema)
        self._lock = threading.Lock()
        self._entries: dict[int, pa.Table] = {}
        self._sorted: Optional[SortedRows] = None
        self._sorted_seqs: tuple[Any, ...] = ()
        #: the flush count the last read saw (None: none yet)
        self.flushes: Optional[int] = None
        self._mark: Optional[tuple[int, int, int]] = None  # the buffer the last read saw
        self._supported = True

    def _empty(self) -> SortedRows:
        return SortedRows.of(empty_table(self.target), self.schema.key_names[0])

    def read(self, tombstones: Sequence[Tombstone] = ()) -> tuple[SortedRows, int]:
        """The buffer's records now, in key order, without the rows of ``tombstones``
        covering their entries, and the table's flush count then."""
        if not self._supported:
            return self._empty(), 0
        with self._lock:
            known = set(self._entries)
        try:
            snap = self.state_store.read_buffer(self.table_id, skip_data=known)
        except NotSupportedError:
            self._supported = False
            return self._empty(), 0
        with self._lock:
            for e in snap.entries:
                if e.data is not None and e.seq not in self._entries:
                    self._entries[e.seq] = pa.ipc.open_stream(pa.py_buffer(e.data)).read_all()
            seqs = snap.seqs
            for gone in set(self._entries) - set(seqs):
                del self._entries[gone]
            seen = (seqs, tuple(t.number for t in tombstones))
            if self._sorted is None or seen != self._sorted_seqs:
                parts = [without_deleted(self._entries[q], covering_entry(tombstones, q))
                         for q in seqs if q in self._entries]
                table = pa.concat_tables(parts) if parts else empty_table(self.target)
                if table.num_rows > 1:
                    table = kernels.sorted_by(table, sort_keys(self.schema))
                self._sorted = SortedRows.of(table.combine_chunks(), self.schema.key_names[0])
                self._sorted_seqs = seen
            self.flushes = snap.flushes
            self._mark = buffer_mark(snap.flushes, seqs)
            return self._sorted, snap.flushes

    def current(self, mark: Optional[tuple[int, int, int]],
                tombstones: Sequence[Tombstone] = ()) -> Optional[SortedRows]:
        """The rows of the last :meth:`read` when ``mark`` (a
        :attr:`~statestore.changes.TableChanges.buffer_mark` read with a query's plan) says
        the buffer holds exactly the entries that read saw, under the same tombstones:
        then they are the buffer's rows in the plan's snapshot, with no read of the state
        store. None otherwise (read instead)."""
        if mark is None:
            return None
        with self._lock:
            if (self._sorted is None or mark != self._mark
                    or self._sorted_seqs[1] != tuple(t.number for t in tombstones)):
                return None
            return self._sorted

    def in_regions(self, rows: SortedRows, regions: Sequence[Region]) -> pa.Table:
        """The rows in any of ``regions`` (each once), in key order: the spans of the
        first row key field the regions cover are found by binary search, and only
        those rows are filtered."""
        table = rows.table
        if not table.num_rows or not regions:
            return table.slice(0, 0)
        spans = []
        for r in regions:
            first = r.ranges[0]
            lo = int(np.searchsorted(rows.first, first.min, "left"))
            hi = len(rows.first) if first.max is None else int(np.searchsorted(rows.first, first.max, "left"))
            if lo < hi:
                spans.append((lo, hi))
        if not spans:
            return table.slice(0, 0)
        spans.sort()
        merged = [spans[0]]
        for lo, hi in spans[1:]:
            if lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        table = pa.concat_tables([table.slice(lo, hi - lo) for lo, hi in merged])
        mask = None
        for r in regions:
            m = region_mask(table, r)
            mask = m if mask is None else kernels.or_(mask, m)
        return kernels.filter_rows(table, mask)
