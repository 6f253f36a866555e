"""The state store's own copies, for the proof of erasure: the blobs a backend keeps
records in outside its rows (:meth:`~statestore.store.StateStore.record_blobs`: every
DynamoDB buffer blob, named by an entry or stray), and its records that hold a delete's
keys (:meth:`~statestore.store.StateStore.delete_key_records`: live tombstones,
transaction bodies, history rows, snapshots), each with when it goes.

A record holding a delete's keys is listed when one of its delete regions overlaps one
the report asks about: the bounds of a region are key values (a key's delete holds the
key itself). History ``detail`` holds no keys (docs/adr/0015-erasure-of-delete-keys.md).
"""

from __future__ import annotations

from typing import Optional, Sequence

from sleeper_ops.maintenance.erasure.decode import CannotTell, blob_hits
from sleeper_ops.maintenance.erasure.report import ErasureReport, HeldObject, iso
from statestore.catalog import TableInfo
from statestore.deletes import Tombstone
from statestore.region import Region
from statestore.roles import History, WriteBuffer


def check_blobs(state_store: WriteBuffer, table: TableInfo, probe: Tombstone, report: ErasureReport) -> None:
    """Add the record blobs of the table that hold matching rows (or cannot be decoded)."""
    for blob in state_store.record_blobs(table.table_id):
        report.blobs_checked += 1
        rows: Optional[int]
        try:
            rows = blob_hits(blob.data, probe)
        except CannotTell:
            rows = None
        if rows == 0:
            continue
        goes = ("with its entry's flush (then purged like any file)" if blob.named else
                "with the state store's sweep of blobs no entry names (a stray: an entry's flush or write "
                "whose outcome was unknown)")
        report.held.append(HeldObject("buffer blob", blob.key, rows, goes=goes))


def check_state_records(state_store: History, table: TableInfo, regions: Sequence[Region], report: ErasureReport,
                        now_ms: int) -> None:
    """Add the state store's records that hold a key in ``regions``, with when each goes."""
    asked = tuple(regions)
    for rec in state_store.delete_key_records(table.table_id, now_ms):
        report.state_records_checked += 1
        if not rec.holds_any(asked):
            continue
        goes = rec.goes + (f" (not before {iso(rec.goes_ms)})" if rec.goes_ms is not None else "")
        n = None if rec.regions is None else sum(1 for r in rec.regions if any(r.overlaps(a) for a in asked))
        report.held.append(HeldObject("state store record", rec.what, n, goes=goes, goes_ms=rec.goes_ms))
