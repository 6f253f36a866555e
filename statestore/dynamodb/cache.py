"""Each table's state as this process last saw it: the state after transaction ``n``.

The first use of a table loads its newest snapshot and the transactions after it;
every later use reads only the transactions after ``n`` (one query, usually empty) and
applies them. What the last :data:`CHANGE_HISTORY` transactions touched is remembered,
so :meth:`~statestore.dynamodb.store.DynamoDBStateStore.changes_since` can name the
rows that changed after a given number. A gap in the log after ``n`` (retention deleted transactions this
process never saw) means a fresh load from the newest snapshot.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from statestore.clock import now_ms
from statestore.dynamodb import snapshots
from statestore.dynamodb.blobs import BlobStore
from statestore.dynamodb.connection import Dynamo
from statestore.dynamodb.log import LoggedTransaction, read_after
from statestore.errors import StateStoreUnavailableError, TableNotFoundError
from statestore.state import TableState
from statestore.transactions import Touches, Transaction

#: how many transactions' touches a :class:`CachedTable` remembers
CHANGE_HISTORY = 10_000


@dataclass
class CachedTable:
    """A table's state after transaction ``n`` (-1: not loaded). Hold ``lock`` to read
    or change it. ``snapshot_n``/``snapshot_ms``: the newest snapshot known here.
    ``touched``: (number, what it touched) of the transactions applied here after
    ``touched_from`` (the last :data:`CHANGE_HISTORY` of them)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    n: int = -1
    state: TableState = field(default_factory=TableState)
    snapshot_n: int = 0
    snapshot_ms: int = 0
    touched: deque[tuple[int, Touches]] = field(default_factory=lambda: deque(maxlen=CHANGE_HISTORY))
    touched_from: int = -1

    def apply(self, number: int, txn: Transaction) -> None:
        """Apply transaction ``number`` (the one after ``n``) and remember what it touched."""
        txn.apply(self.state)
        self.n = number
        self.touched.append((number, txn.touches()))

    def touched_since(self, after: int) -> Touches | None:
        """The union of what the transactions after ``after`` (up to ``n``) touched, or
        None when that is not known here (``whole_table`` when one touched everything)."""
        if after < self.touched_from or after > self.n:
            return None
        pids: set[str] = set()
        names: set[str] = set()
        oldest = after + 1
        for number, t in reversed(self.touched):
            if number <= after:
                break
            if t.whole_table:
                return Touches(whole_table=True)
            pids |= t.partition_ids
            names |= t.filenames
            oldest = number
        if oldest != after + 1 and after != self.n:
            return None  # forgotten (older than the history kept)
        return Touches(frozenset(pids), frozenset(names))


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
            e.apply(t.n, t.transaction)
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
            e.touched.clear()
            e.touched_from = e.n
            e.snapshot_n = start
            e.snapshot_ms = pointer.time_ms if pointer is not None else now_ms()
            return tail
        raise StateStoreUnavailableError(f"the transaction log of table {table_id} keeps changing under its "
                                         "snapshots; cannot load its state")
