"""What the DynamoDB store keeps that the proof of erasure must see
(:meth:`~statestore.store.StateStore.record_blobs`,
:meth:`~statestore.store.StateStore.delete_key_records`).

* **Record blobs**: every object under ``<table_id>/buffer/`` in the blob store, named by
  a live buffer entry or not (a stray: a flush whose reply was lost, a failed write or
  best-effort delete). Listed, then read; a blob gone in between (its flush deleted it)
  holds nothing and is skipped. The write buffer role lists them
  (:meth:`DynamoWriteBuffer.record_blobs <statestore.dynamodb.buffer.DynamoWriteBuffer.record_blobs>`).
* **Records holding a delete's keys**: the live tombstones; each log item of a delete
  (its body, inline or spilled under ``transactions/<table_id>/``); each group commit
  request of a delete still pending (until decided, or pruned by GC after the commit
  id retention when abandoned); each snapshot whose
  state holds tombstones; and any body or snapshot blob under the table's prefixes that
  no log item or pointer names (a stray of a failed commit). A log item and a snapshot
  go with :meth:`~statestore.dynamodb.store.DynamoDBStateStore.expire` (run by GC):
  once a snapshot made at least ``retention_margin`` transactions after the item (or a
  newer snapshot) is older than the table's history retention, and the item is older
  than ``retention_seconds``. Snapshots are made by committers, so that needs commits
  after the delete's tombstone is dropped.

:class:`DynamoErasure` finds the records holding a delete's keys; the history role
answers :meth:`~statestore.store.StateStore.delete_key_records` with it.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Optional

from statestore.deletes import TOMBSTONE_GOES, KeyRecord, Tombstone
from statestore.dynamodb import snapshots
from statestore.dynamodb.blob_sweep import DynamoBlobSweep
from statestore.dynamodb.catalog import table_info as catalog_info
from statestore.dynamodb.connection import get_n, get_s, s
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.group_batch import PENDING, REQUESTS
from statestore.dynamodb.log import decode
from statestore.dynamodb.retention import DynamoRetention
from statestore.dynamodb.table_commits import DynamoCommits
from statestore.errors import StateStoreUnavailableError
from statestore.history import retention_ms
from statestore.store import COMMIT_ID_RETENTION_MS
from statestore.transactions import DeleteRecords, transaction_from_dict

_STRAY_GOES = "with the state store's sweep of blobs nothing names (after its floor)"


class DynamoErasure:
    """The records holding a delete's keys, over the store's one
    :class:`~statestore.dynamodb.context.DynamoContext`: the live tombstones and the
    snapshot options come from ``commits``, the names of blobs from ``sweep``, and when
    log items and snapshots go from ``retention``."""

    def __init__(self, context: DynamoContext, commits: DynamoCommits, sweep: DynamoBlobSweep,
                 retention: DynamoRetention) -> None:
        self.context = context
        self.commits = commits
        self.sweep = sweep
        self.retention = retention

    def delete_key_records(self, table_id: str, now_ms: int) -> list[KeyRecord]:
        """The live tombstones, delete log items, snapshots holding tombstones and stray
        bodies and snapshots of the table (see the module docstring)."""
        info = catalog_info(self.context.table_item(table_id))
        history_ms = retention_ms(info)
        _, live = self.commits.tombstones(table_id)
        out = [KeyRecord(f"tombstone {t.number}", t.regions, t.where, TOMBSTONE_GOES) for t in live]
        # listed before the names are read (as the sweep does): a blob named meanwhile is not taken for a stray
        listed = [k for prefix in (f"transactions/{table_id}/", f"snapshots/{table_id}/")
                  for k, _ in self.context.blobs.list(prefix)]
        named = self.sweep.named_blobs(table_id)
        pointers = snapshots.all_pointers(self.context.dynamo, table_id)
        for it in self.context.dynamo.query(f"read the transaction log of table {table_id}", "log", "table_id = :t",
                                     {":t": s(table_id)}):
            txn = self._delete_of(it)
            if txn is None:
                continue
            body_key = get_s(it, "body_key")
            number, time_ms = get_n(it, "n") or 0, get_n(it, "time_ms") or 0
            where = f"log item {number} (a delete's body{f', spilled to {body_key}' if body_key else ''})"
            out.append(KeyRecord(where, txn.regions, txn.where, *self._log_item_goes(number, time_ms, pointers,
                                                                                history_ms)))
        for i, p in enumerate(pointers):
            held = self._tombstones_of(snapshots.load(self.context.blobs, p))
            if held:
                nxt = pointers[i + 1] if i + 1 < len(pointers) else None
                goes_ms = None if nxt is None else max(nxt.time_ms + history_ms,
                                                       p.time_ms + int(self.retention.retention_seconds * 1000))
                out.append(KeyRecord(f"snapshot {p.n} ({p.key}: tombstones {', '.join(str(t.number) for t in held)})",
                                     tuple(r for t in held for r in t.regions), None,
                                     "with expiry once a newer snapshot is older than the history retention",
                                     goes_ms))
        out += self._pending_deletes(table_id)
        out += self._stray_deletes([k for k in listed if k not in named])
        return out

    def _delete_of(self, item: dict[str, Any]) -> Optional[DeleteRecords]:
        """The delete a log item or a pending request carries (None: another transaction)."""
        if get_s(item, "type") != DeleteRecords.TYPE:
            return None
        txn = decode(item, self.context.blobs)
        assert isinstance(txn, DeleteRecords)
        return txn

    def _pending_deletes(self, table_id: str) -> list[KeyRecord]:
        """Group commit's pending requests of a delete (each holds its body until a
        leader decides it; an abandoned one until GC prunes it)."""
        out = []
        for it in self.context.dynamo.query(f"list the pending commit requests of table {table_id}", REQUESTS,
                                     "table_id = :t AND begins_with(sk, :p)", {":t": s(table_id), ":p": s(PENDING)}):
            txn = self._delete_of(it)
            if txn is None:
                continue
            t_ms = get_n(it, "t_ms") or 0
            out.append(KeyRecord(f"pending commit request {get_s(it, 'sk')} (a delete's body)", txn.regions, txn.where,
                                 "when a leader decides it (seconds); if abandoned, GC prunes it once older than the "
                                 "commit id retention", t_ms + COMMIT_ID_RETENTION_MS))
        return out

    def _log_item_goes(self, number: int, time_ms: int, pointers: list[snapshots.SnapshotPointer],
                  history_ms: int) -> tuple[str, Optional[int]]:
        margin = self.retention.retention_margin
        later = next((p for p in pointers if p.n >= number + max(1, margin)), None)
        text = (f"with expiry once a snapshot made {margin}+ transactions later is older than the "
                f"history retention (snapshots every {self.commits.snapshots.snapshot_every} transactions or "
                f"{self.commits.snapshots.snapshot_seconds:g} s of commits)")
        if later is None:
            return text, None
        return text, max(later.time_ms + history_ms, time_ms + int(self.retention.retention_seconds * 1000))

    @staticmethod
    def _tombstones_of(state: Any) -> list[Tombstone]:
        return sorted(state.tombstones.values(), key=lambda t: t.number)

    def _stray_deletes(self, stray: list[str]) -> list[KeyRecord]:
        """Of the transaction bodies and snapshots in the blob store that nothing names
        (``stray``), those holding a delete's keys (or that cannot be read back)."""
        out = []
        for key in stray:
            try:
                data = self.context.blobs.get(key)
            except StateStoreUnavailableError:
                continue  # deleted meanwhile (expired, or its commit's cleanup)
            try:
                doc = json.loads(zlib.decompress(data))
                if key.startswith("snapshots/"):
                    held = self._tombstones_of(snapshots.decode_state(data))
                    regions: Optional[tuple[Any, ...]] = tuple(r for t in held for r in t.regions)
                    where = None
                else:
                    txn = transaction_from_dict(doc)
                    if not isinstance(txn, DeleteRecords):
                        continue
                    regions, where = txn.regions, txn.where
            except Exception:
                regions, where = None, None  # cannot be read back: counts as holding any key
            if regions == ():
                continue
            out.append(KeyRecord(f"stray blob {key}", regions, where, _STRAY_GOES))
        return out
