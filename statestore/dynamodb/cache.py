"""Each table's state as this process last saw it: the state after transaction ``n``.

The first use of a table loads its newest snapshot and the transactions after it;
every later use reads only the transactions after ``n`` (one query, usually empty) and
applies them. A gap in the log after ``n`` (retention deleted transactions this
process never saw) means a fresh load from the newest snapshot.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from statestore.dynamodb import snapshots
from statestore.dynamodb.blobs import BlobStore
from statestore.dynamodb.connection import Dynamo
from statestore.dynamodb.log import LoggedTransaction, read_after
from statestore.errors import StateStoreUnavailableError, TableNotFoundError
from statestore.state import TableState


@dataclass
class CachedTable:
    """A table's state after transaction ``n`` (-1: not loaded). Hold ``lock`` to read
    or change it. ``snapshot_n``/``snapshot_ms``: the newest snapshot known here."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    n: int = -1
    state: TableState = field(default_factory=TableState)
    snapshot_n: int = 0
    snapshot_ms: int = 0


class StateCache:
    """The per-table :class:`CachedTable` of one store object."""

    def __init__(self, dynamo: Dynamo, blobs: BlobStore) -> None:
        self._dynamo = dynamo
        self._blobs = blobs
        self._tables: dict[str, CachedTable] = {}
        self._lock = threading.Lock()

    def entry(self, table_id: str) -> CachedTable:
        with self._lock:
            e = self._tables.get(table_id)
            if e is None:
                e = self._tables[table_id] = CachedTable()
            return e

    def forget(self, table_id: str) -> None:
        with self._lock:
            self._tables.pop(table_id, None)

    def refresh(self, table_id: str, e: CachedTable) -> list[LoggedTransaction]:
        """Bring ``e`` (its lock held) up to the end of the log; returns the transactions
        applied (after a fresh load: those after the snapshot). Raises
        TableNotFoundError when the table has neither a snapshot nor a log."""
        if e.n < 0:
            return self._load(table_id, e)
        tail = read_after(self._dynamo, self._blobs, table_id, e.n)
        if tail and tail[0].n != e.n + 1:
            return self._load(table_id, e)
        for t in tail:
            t.transaction.apply(e.state)
            e.n = t.n
        return tail

    def _load(self, table_id: str, e: CachedTable) -> list[LoggedTransaction]:
        for _ in range(5):
            pointer = snapshots.latest(self._dynamo, table_id)
            start = 0 if pointer is None else pointer.n
            tail = read_after(self._dynamo, self._blobs, table_id, start)
            if pointer is None and not tail:
                e.n = -1
                raise TableNotFoundError(f"no table with id {table_id}")
            if tail and tail[0].n != start + 1:
                continue  # retention removed the start of this tail meanwhile: a newer snapshot exists
            state = TableState() if pointer is None else snapshots.load(self._blobs, pointer)
            for t in tail:
                t.transaction.apply(state)
            e.state, e.n = state, tail[-1].n if tail else start
            e.snapshot_n = start
            e.snapshot_ms = pointer.time_ms if pointer is not None else int(time.time() * 1000)
            return tail
        raise StateStoreUnavailableError(f"the transaction log of table {table_id} keeps changing under its "
                                         "snapshots; cannot load its state")
