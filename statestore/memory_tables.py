"""The in-memory store's shared data: every table's catalog entry, state, jobs, leases,
queue, buffer, client writes and history in dicts under one lock
(:class:`MemoryTables`). Each role of :class:`~statestore.memory.InMemoryStateStore`
works on the same :class:`MemoryTables`, holding its lock for the whole of each call,
so a commit and its bookkeeping are one atomic step, as on the other backends."""

from __future__ import annotations

import threading
import uuid
from collections import deque
from typing import Optional

from statestore.buffer import BufferEntry
from statestore.catalog import TableInfo
from statestore.client_writes import ClientWrite, ClientWriteRecord
from statestore.clock import now_ms
from statestore.errors import TableNotFoundError
from statestore.ingest_requests import IngestRequest
from statestore.jobs import JobRecord
from statestore.leases import Lease
from statestore.state import TableState
from statestore.summaries import TransactionSummary
from statestore.transactions import Touches, Transaction


class MemoryTables:
    """Everything the in-memory store holds, and the one lock that guards all of it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.tables: dict[str, TableInfo] = {}  # by name
        self.states: dict[str, TableState] = {}  # by table id
        self.jobs: dict[tuple[str, str], JobRecord] = {}
        self.leases: dict[str, Lease] = {}
        self.ingest_requests: dict[str, dict[str, IngestRequest]] = {}  # table id -> id -> request
        self.commit_ids: dict[str, dict[str, int]] = {}  # table id -> commit id -> applied at (ms)
        self.epoch = uuid.uuid4().hex  # tells this store's change tokens from another's
        self.instance_id = str(uuid.uuid4())  # the store's identity (StateStore.instance_id)
        self.versions: dict[str, int] = {}  # table id -> commits applied
        self.changes: dict[str, deque[tuple[int, Touches]]] = {}  # table id -> (version, what it touched)
        self.buffers: dict[str, dict[int, BufferEntry]] = {}  # table id -> seq -> entry
        self.next_seq = 0  # one sequence for every table, as in PostgreSQL
        self.flushes: dict[str, int] = {}  # table id -> flushes committed
        self.client_writes: dict[str, dict[str, ClientWriteRecord]] = {}  # table id -> key -> record
        # table id -> the state after create_table, and (summary, transaction) of every commit since
        self.first_states: dict[str, TableState] = {}
        self.history: dict[str, list[tuple[TransactionSummary, Optional[Transaction]]]] = {}
        self.base_numbers: dict[str, int] = {}  # table id -> the number whose state first_states holds

    def state(self, table_id: str) -> TableState:
        """The table's live state (the caller holds the lock). Raises TableNotFoundError."""
        try:
            return self.states[table_id]
        except KeyError:
            raise TableNotFoundError(f"no table with id {table_id}") from None

    def info(self, table_id: str) -> TableInfo:
        """The catalog entry of a table known to exist (the caller holds the lock)."""
        return next(t for t in self.tables.values() if t.table_id == table_id)

    def requests(self, table_id: str) -> dict[str, IngestRequest]:
        """The table's ingest queue (the caller holds the lock). Raises TableNotFoundError."""
        self.state(table_id)
        return self.ingest_requests.setdefault(table_id, {})

    def earlier_write(self, table_id: str, write: Optional[ClientWrite]) -> Optional[ClientWriteRecord]:
        """The table's record of ``write``'s key (checked against its digest), or None."""
        if write is None:
            return None
        earlier = self.client_writes.get(table_id, {}).get(write.request_id)
        return None if earlier is None else earlier.answer_for(table_id, write)

    def remember(self, table_id: str, write: Optional[ClientWrite], seq: int) -> None:
        """Record ``write``'s key with ``seq`` (nothing when there is no write)."""
        if write is not None:
            self.client_writes.setdefault(table_id, {})[write.request_id] = ClientWriteRecord(
                write.request_id, write.digest, seq, write.answer, now_ms())
