"""Snapshots of a table's state in the blob store, each behind a pointer item
``(table_id, n)`` in the ``snapshots`` table: the state after transaction n.

A snapshot is zlib-compressed JSON holding the partitions and tombstones as records
(:mod:`statestore.codec`), the files as ``[name, update_time]`` rows and the references
as ``[file, partition, records, approximate, whole, job, update_time, delete_horizon]``
rows (:func:`statestore.codec.row`: the fields in declaration order): about 2 MB
and a fraction of a second each way for 100k references. The blob is written before
its pointer, under a fresh key, so a pointer always names a complete snapshot.
"""

from __future__ import annotations

import json
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Optional

from statestore.codec import encode, from_row, row
from statestore.deletes import Tombstone
from statestore.dynamodb.blobs import BlobStore
from statestore.dynamodb.connection import Dynamo, get_n, get_s, n, s
from statestore.dynamodb.writes import cleanup_on_refusal, delete_quietly, put_if_absent
from statestore.files import FileRecord, FileReference
from statestore.partitions import Partition
from statestore.state import TableState


@dataclass(frozen=True)
class SnapshotPointer:
    table_id: str
    n: int
    key: str
    time_ms: int

    @classmethod
    def of(cls, item: dict[str, Any]) -> SnapshotPointer:
        return cls(get_s(item, "table_id") or "", get_n(item, "n") or 0, get_s(item, "key") or "",
                   get_n(item, "time_ms") or 0)


def encode_state(state: TableState) -> bytes:
    doc = {
        "partitions": [encode(p) for p in state.partitions.values()],
        "files": [row(f) for f in state.files.values()],
        "references": [row(r) for r in state.references.values()],
        "tombstones": [encode(t) for t in state.tombstones.values()],
        "delete_count": state.delete_count,
    }
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 1)


def decode_state(data: bytes) -> TableState:
    doc = json.loads(zlib.decompress(data))
    state = TableState()
    state.partitions = {p["id"]: Partition.from_dict(p) for p in doc["partitions"]}
    state.files = {f[0]: from_row(FileRecord, f) for f in doc["files"]}
    state.tombstones = {t.number: t for t in (Tombstone.from_dict(d) for d in doc.get("tombstones", ()))}
    state.delete_count = doc.get("delete_count", 0)
    state.put_references(from_row(FileReference, r) for r in doc["references"])
    return state


def write(dynamo: Dynamo, blobs: BlobStore, table_id: str, number: int, state: TableState, time_ms: int) -> None:
    """Save ``state`` (the state after transaction ``number``) and point to it. A
    pointer for ``number`` written meanwhile by another process is kept (the same state)
    and our blob deleted; a pointer naming our blob is ours (a try whose reply was lost,
    retried by botocore). On an unknown outcome the blob is kept
    (:mod:`statestore.dynamodb.writes`)."""
    key = f"snapshots/{table_id}/{number:020d}-{uuid.uuid4().hex[:8]}.json.z"
    what = f"point to snapshot {number} of table {table_id}"
    blobs.put(key, encode_state(state))
    item = {"table_id": s(table_id), "n": n(number), "key": s(key), "time_ms": n(time_ms)}
    with cleanup_on_refusal(blobs, [key], what):
        mine = put_if_absent(dynamo, what, "snapshots", item, {"table_id": s(table_id), "n": n(number)},
                             "attribute_not_exists(n)", lambda stored: get_s(stored, "key") == key)
    if not mine:
        delete_quietly(blobs, [key], what)  # another process's pointer: a definite no


def latest(dynamo: Dynamo, table_id: str) -> Optional[SnapshotPointer]:
    for it in dynamo.query(f"find the latest snapshot of table {table_id}", "snapshots", "table_id = :t",
                           {":t": s(table_id)}, forward=False, limit=1):
        return SnapshotPointer.of(it)
    return None


def all_pointers(dynamo: Dynamo, table_id: str) -> list[SnapshotPointer]:
    """Every snapshot of the table, oldest first."""
    return [SnapshotPointer.of(it) for it in dynamo.query(
        f"list the snapshots of table {table_id}", "snapshots", "table_id = :t", {":t": s(table_id)})]


def load(blobs: BlobStore, pointer: SnapshotPointer) -> TableState:
    return decode_state(blobs.get(pointer.key))
