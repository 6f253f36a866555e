"""The proof of erasure (issue 22): every object that may still hold records matching
a key, range and predicate, found exactly.

Objects that can hold records, and are all checked:

* **data files**: every file the state store tracks, referenced by a partition or
  unreferenced and awaiting garbage collection (its object still exists). The Parquet
  statistics of the first row key field rule a file out first; the rest are read and
  their matching rows counted.
* **write buffer entries**: each entry holds its records (in PostgreSQL a row of
  ``write_buffer``; in DynamoDB an item or, when large, a blob object). Each is decoded
  and its matching rows counted.

* **exports** (:mod:`sleeper_ops.io.export_manifest`): every committed export the table
  recorded (a job of kind ``export`` naming its manifest) whose manifest is still there;
  each file the manifest names that still exists is checked like a data file. An export
  is a copy outside the table: no delete or compaction reaches it, so the report names
  it until its owner removes it (or the matching files).

Objects that hold no records, so need no check: the state store's partitions, file
references and file records (names, counts, key ranges of partitions), PostgreSQL's
change log, and DynamoDB's transaction log bodies and snapshots (file metadata only:
the log of a flush names the files, the records went to the files). Other files outside
the table (ingest sources, copies users made) are the users' own.

A matching row counts whether a delete hides it or not (a record written after the
delete matches too): the report is clean (``sleeper report erasure`` exits 0) once no
object holds a matching row. The buffer is read before the state, so an entry flushed
in between is seen in its file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from sleeper_ops.engine.deletes import check_where, covering_entry, covering_file, key_bounds, matches
from sleeper_ops.io.export_manifest import read_manifest
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.maintenance.deletes import delete_regions
from statestore.catalog import TableInfo
from statestore.deletes import Tombstone
from statestore.errors import NotSupportedError
from statestore.region import Region
from statestore.store import StateStore

NO_ROWS = ("state store rows (partitions, file references, file records), the PostgreSQL change log, and DynamoDB "
           "transaction bodies and snapshots hold file metadata only, never records")


@dataclass(frozen=True)
class HeldObject:
    """An object holding ``rows`` matching records, ``hidden`` of them by deletes."""

    kind: str  # "file", "file awaiting GC", "buffer entry" or "export file"
    name: str
    rows: int
    hidden: int
    partitions: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "rows": self.rows, "hidden_by_deletes": self.hidden,
                "partitions": list(self.partitions)}


@dataclass
class ErasureReport:
    """What holds records matching ``regions`` and ``where`` (see the module docstring)."""

    table: str
    regions: tuple[Region, ...]
    where: Optional[str]
    held: list[HeldObject] = field(default_factory=list)
    files_checked: int = 0
    files_read: int = 0
    buffer_entries_checked: int = 0
    exports_checked: int = 0

    @property
    def clean(self) -> bool:
        return not self.held

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "regions": [r.to_dict() for r in self.regions], "where": self.where,
                "clean": self.clean, "held": [h.to_dict() for h in self.held],
                "files_checked": self.files_checked, "files_read": self.files_read,
                "buffer_entries_checked": self.buffer_entries_checked, "exports_checked": self.exports_checked,
                "hold_no_records": NO_ROWS}

    def render(self) -> str:
        head = (f"{self.table}: checked {self.files_checked} files ({self.files_read} read after their statistics) "
                f"and {self.buffer_entries_checked} buffer entries and {self.exports_checked} exports")
        if self.clean:
            return f"{head}: no object holds a matching record (erased)\n({NO_ROWS})"
        lines = [f"{head}: {len(self.held)} objects still hold matching records:"]
        for h in self.held:
            where = f" in {', '.join(h.partitions)}" if h.partitions else ""
            if h.kind == "export file":
                lines.append(f"  {h.kind}: {h.name}: {h.rows} records (a copy outside the table: remove it)")
                continue
            lines.append(f"  {h.kind}: {h.name}{where}: {h.rows} records ({h.hidden} hidden by deletes, "
                         "awaiting compaction or GC)")
        return "\n".join(lines)


def erasure_report(state_store: StateStore, objects: ObjectStore, table: TableInfo, *, keys: Sequence[Any] = (),
                   ranges: Sequence[tuple[Any, Optional[Any]]] = (), where: Optional[str] = None) -> ErasureReport:
    """Find every object holding a record matching the keys or ranges and ``where``."""
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
        with objects.open_input(name) as f:
            pf = pq.ParquetFile(f, pre_buffer=False)
            bounds = key_bounds(pf.metadata, first)
            if bounds is not None and not any(r.ranges[0].overlaps(bounds[0], _after(bounds[1])) for r in regions):
                continue
            report.files_read += 1
            rows = pf.read()
        hit = rows.filter(matches(rows, probe))
        if not hit.num_rows:
            continue
        horizon = min((r.delete_horizon for r in refs), default=0)
        hidden = hit.num_rows - _visible(hit, covering_file(live, horizon))
        report.held.append(HeldObject("file" if refs else "file awaiting GC", name, hit.num_rows, hidden,
                                      tuple(r.partition_id for r in refs)))
    _check_exports(state_store, objects, table, regions, probe, report)
    return report


def _check_exports(state_store: StateStore, objects: ObjectStore, table: TableInfo, regions: Sequence[Region],
                   probe: Tombstone, report: ErasureReport) -> None:
    """Add the files of the table's committed exports that hold matching rows."""
    first = table.schema.row_key_names[0]
    for job in state_store.list_jobs(table.table_id, kind="export"):
        if job.status != "committed" or not job.output:
            continue
        root = job.output.rsplit("/", 1)[0]
        if not root.startswith("s3://") and not os.path.isdir(root):
            continue  # removed by its owner
        dest = ObjectStore(root, objects.s3)
        manifest = read_manifest(dest)
        if manifest is None or manifest.table_id != table.table_id:
            continue
        report.exports_checked += 1
        for f in manifest.files:
            if dest.head(f.key) is None:
                continue
            with dest.open_input(f.key) as src:
                pf = pq.ParquetFile(src, pre_buffer=False)
                bounds = key_bounds(pf.metadata, first)
                if bounds is not None and not any(r.ranges[0].overlaps(bounds[0], _after(bounds[1]))
                                                  for r in regions):
                    continue
                rows = pf.read()
            hit = int(rows.filter(matches(rows, probe)).num_rows) if rows.num_rows else 0
            if hit:
                report.held.append(HeldObject("export file", dest.uri_of(f.key), hit, 0))


def _visible(rows: Any, tombstones: Sequence[Tombstone]) -> int:
    from sleeper_ops.engine.deletes import without_deleted

    return int(without_deleted(rows, tombstones).num_rows)


def _after(v: Any) -> Any:
    """An exclusive upper bound just above ``v`` (for :meth:`Range.overlaps`)."""
    if isinstance(v, int):
        return v + 1
    if isinstance(v, str):
        return v + "\x00"
    if isinstance(v, bytes):
        return v + b"\x00"
    return None
