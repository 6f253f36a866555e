"""Exports, for the proof of erasure: every export job the table recorded (kind
``export``), committed or not, with no limit on how many.

An export job's record names its manifest (``output``, and ``outputs`` from its start),
so a crashed export -- no manifest, or a manifest of another run -- still names its
destination. Every part file there (``part-NNNNN-<leaf>...parquet``: the files of the
committed manifest, and those a crashed attempt left) is decoded and its matching rows
counted; one that cannot be decoded is "cannot tell". An export is a copy outside the
table: no delete, compaction or GC reaches it, so it is listed until its owner removes
it (or the matching files). A destination that no longer exists is skipped.
"""

from __future__ import annotations

import os
import re
from typing import Optional, Sequence

from sleeper_ops.io.export_manifest import MANIFEST, read_manifest
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.maintenance.erasure.decode import CannotTell, matching_rows
from sleeper_ops.maintenance.erasure.report import ErasureReport, HeldObject
from statestore.catalog import TableInfo
from statestore.deletes import Tombstone
from statestore.region import Region
from statestore.roles import JobTracker
from statestore.store import StateStore

_PART = re.compile(r"^part-\d{5}-.+\.parquet$")


def export_roots(state_store: JobTracker, table: TableInfo) -> list[str]:
    """The destinations (directory or ``s3://`` prefix) every export job of the table
    names, each once, in the order first seen (newest job first)."""
    roots: list[str] = []
    for job in state_store.list_jobs(table.table_id, kind="export", limit=None):
        for uri in (job.output, *job.outputs):
            if uri and uri.endswith("/" + MANIFEST):
                root = uri[: -len(MANIFEST) - 1]
                if root not in roots:
                    roots.append(root)
    return roots


def check_exports(state_store: StateStore, objects: ObjectStore, table: TableInfo, regions: Sequence[Region],
                  probe: Tombstone, report: ErasureReport) -> None:
    """Add the part files of the table's exports that hold matching rows (see the module docstring)."""
    for root in export_roots(state_store, table):
        if not root.startswith("s3://") and not os.path.isdir(root):
            continue  # removed by its owner
        dest = ObjectStore(root, objects.s3)
        manifest = read_manifest(dest)
        if manifest is not None and manifest.table_id != table.table_id:
            continue  # another table's export now holds the destination (ours was removed)
        report.exports_checked += 1
        committed = set() if manifest is None else {f.key for f in manifest.files}
        for o in dest.list(""):
            if "/" in o.key or not _PART.match(o.key):
                continue
            rows: Optional[int]
            try:
                rows = matching_rows(dest, o.key, table.schema, regions, probe)
            except CannotTell:
                rows = None
            if rows == 0:
                continue
            kind = "export file" if o.key in committed else "crashed export file"
            report.held.append(HeldObject(kind, dest.uri_of(o.key), rows,
                                          goes="when its owner removes it (a copy outside the table)"))
