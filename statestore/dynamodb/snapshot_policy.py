"""When committers write snapshots of a table's state (:mod:`statestore.dynamodb.snapshots`).

The committer whose commit (or group commit batch) crosses the line writes one, after
its commit and best effort: a snapshot is due once :attr:`SnapshotPolicy.snapshot_every`
transactions were logged since the last one, or :attr:`SnapshotPolicy.snapshot_seconds`
passed with at least one. Before writing, the newest pointer is read, so stores sharing
the tables do not each write the same snapshot."""

from __future__ import annotations

import logging

from statestore.clock import now_ms
from statestore.dynamodb import snapshots
from statestore.dynamodb.cache import CachedTable
from statestore.dynamodb.context import DynamoContext
from statestore.errors import StateStoreUnavailableError

log = logging.getLogger(__name__)


class SnapshotPolicy:
    """The snapshot options of the DynamoDB store (settable) and the snapshots they
    call for, over the store's one :class:`~statestore.dynamodb.context.DynamoContext`."""

    def __init__(self, context: DynamoContext, *, snapshot_every: int, snapshot_seconds: float) -> None:
        self.context = context
        self.snapshot_every = snapshot_every
        self.snapshot_seconds = snapshot_seconds

    def maybe_snapshot(self, table_id: str, entry: CachedTable) -> None:
        """Write a snapshot of ``entry`` (lock held) when one is due; best effort."""
        now = now_ms()

        def due() -> bool:
            behind = entry.n - entry.snapshot_n
            return behind >= self.snapshot_every or (
                behind > 0 and now - entry.snapshot_ms >= self.snapshot_seconds * 1000)

        if not due():
            return
        try:
            newest = snapshots.latest(self.context.dynamo, table_id)
            if newest is not None and newest.n > entry.snapshot_n:
                entry.snapshot_n, entry.snapshot_ms = newest.n, newest.time_ms
                if not due():
                    return
            snapshots.write(self.context.dynamo, self.context.blobs, table_id, entry.n, entry.state, now)
            entry.snapshot_n, entry.snapshot_ms = entry.n, now
        except StateStoreUnavailableError as e:
            log.warning("snapshot %d of table %s not written: %s", entry.n, table_id, e)

    def snapshot(self, table_id: str) -> int:
        """Write a snapshot of the table's current state now; returns its transaction number."""
        self.context.require_table_id(table_id)
        entry = self.context.cache.entry(table_id)
        with entry.lock:
            self.context.cache.refresh(table_id, entry)
            now = now_ms()
            snapshots.write(self.context.dynamo, self.context.blobs, table_id, entry.n, entry.state, now)
            entry.snapshot_n, entry.snapshot_ms = entry.n, now
            return entry.n
