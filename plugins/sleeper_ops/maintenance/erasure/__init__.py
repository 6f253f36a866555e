"""The proof of erasure (issues 22 and 33): every place that may still hold records, or
the keys, matching a key, range and predicate, each found exactly and listed with what
it is and when it goes. ``sleeper report erasure`` exits 3 until none remains.

Where a copy can be, and all are checked (DESIGN.md section 12):

* **data files**: every file the state store tracks, referenced by a partition or
  unreferenced and awaiting garbage collection (its object still exists). The Parquet
  statistics of the first row key field rule a file out first; the rest are read and
  their matching rows counted.
* **untracked objects** under the table's data prefix and its bulk import scratch runs
  (:mod:`~sleeper_ops.maintenance.erasure.untracked`): orphans, losing Spark attempts,
  named outputs of unfinished jobs, scratch runs, sidecars of untracked files.
* **write buffer entries**, each decoded, and on backends that keep record bytes
  outside their rows (DynamoDB's blob store) every such blob, whether an entry names
  it or not (:meth:`~statestore.store.StateStore.record_blobs`).
* **exports** (:mod:`~sleeper_ops.maintenance.erasure.exports`): every export the table
  recorded, committed or crashed, with no limit.
* **the state store's own records that hold a delete's keys**
  (:meth:`~statestore.store.StateStore.delete_key_records`): live tombstones,
  transaction bodies and history rows, snapshots; each with when it ages out.

An object that cannot be decoded is listed as "cannot tell" and keeps the report from
being clean. A matching row counts whether a delete hides it or not (a record written
after the delete matches too). The buffer is read before the state, so an entry flushed
in between is seen in its file. Not checked (:data:`~sleeper_ops.maintenance.erasure.report.FINE_PRINT`):
files outside the table that users own, and backups.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import pyarrow as pa

from sleeper_ops.engine.deletes import check_where, covering_entry, covering_file, matches, without_deleted
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.maintenance.deletes import delete_regions
from sleeper_ops.maintenance.erasure.decode import parquet_hits
from sleeper_ops.maintenance.erasure.exports import check_exports
from sleeper_ops.maintenance.erasure.report import FINE_PRINT, ErasureReport, HeldObject
from sleeper_ops.maintenance.erasure.state_records import check_blobs, check_state_records
from sleeper_ops.maintenance.erasure.untracked import check_untracked
from statestore import clock
from statestore.catalog import TableInfo
from statestore.deletes import Tombstone
from statestore.errors import NotSupportedError
from statestore.store import StateStore

__all__ = ["FINE_PRINT", "ErasureReport", "HeldObject", "erasure_report"]


def erasure_report(state_store: StateStore, objects: ObjectStore, table: TableInfo, *, keys: Sequence[Any] = (),
                   ranges: Sequence[tuple[Any, Optional[Any]]] = (), where: Optional[str] = None,
                   now_ms: Optional[int] = None) -> ErasureReport:
    """Find every place holding a record (or key) matching the keys or ranges and
    ``where`` (see the module docstring). ``now_ms``: the time the report judges when
    things go at (tests); default now."""
    now = clock.now_ms() if now_ms is None else now_ms
    regions = delete_regions(table.schema, keys, ranges)
    where = check_where(table.schema, where)
    probe = Tombstone(0, regions, where)
    report = ErasureReport(table.name, regions, where)
    try:
        entries = state_store.read_buffer(table.table_id).entries
    except NotSupportedError:
        entries = ()
    state = state_store.load_state(table.table_id)
    live = list(state.tombstones.values())
    for e in entries:
        report.buffer_entries_checked += 1
        if e.data is None:
            continue
        rows = pa.ipc.open_stream(pa.py_buffer(e.data)).read_all()
        hit = rows.filter(matches(rows, probe))
        if hit.num_rows:
            hidden = hit.num_rows - _visible(hit, covering_entry(live, e.seq))
            report.held.append(HeldObject("buffer entry", str(e.seq), hit.num_rows, hidden))
    first = table.schema.row_key_names[0]
    for name in sorted(state.files):
        refs = [state.references[(name, p)] for p in sorted(state.refs_by_file.get(name, ()))]
        if objects.head(name) is None:
            continue  # deleted by garbage collection (forgotten at its next commit)
        report.files_checked += 1
        hit = parquet_hits(objects, name, first, regions, probe)
        if hit is None:
            continue
        report.files_read += 1
        if not hit.num_rows:
            continue
        horizon = min((r.delete_horizon for r in refs), default=0)
        hidden = hit.num_rows - _visible(hit, covering_file(live, horizon))
        report.held.append(HeldObject("file" if refs else "file awaiting GC", name, hit.num_rows, hidden,
                                      tuple(r.partition_id for r in refs)))
    check_untracked(state_store, objects, table, state, regions, probe, report, now)
    check_blobs(state_store, table, probe, report)
    check_exports(state_store, objects, table, regions, probe, report)
    check_state_records(state_store, table, regions, report, now)
    return report


def _visible(rows: Any, tombstones: Sequence[Tombstone]) -> int:
    return int(without_deleted(rows, tombstones).num_rows)
