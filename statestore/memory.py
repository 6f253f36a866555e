"""In-memory state store: the reference model, for unit tests and embedding.

:class:`InMemoryStateStore` composes one object per role (:mod:`statestore.roles`) over
one :class:`~statestore.memory_tables.MemoryTables`: the catalog and the table commits
here, the job tracker, ingest queue, write buffer and client writes in
:mod:`statestore.memory_roles`, the leases in :mod:`statestore.memory_leases` and the
history in :mod:`statestore.memory_history`. Every role call holds the one lock."""

from __future__ import annotations

import uuid
from collections import deque
from typing import Any, Mapping, Optional, Sequence

from statestore.catalog import TableInfo
from statestore.changes import TableChanges, is_token_of
from statestore.client_writes import ClientWrite
from statestore.clock import now_ms
from statestore.composed import ComposedStateStore
from statestore.errors import BookkeepingError, TableExistsError, TableNotFoundError
from statestore.history import fragment_of, summarise
from statestore.ingest_requests import IngestRequest
from statestore.jobs import JobRecord, check_job_bookkeeping
from statestore.memory_history import MemoryHistory
from statestore.memory_leases import MemoryLeases
from statestore.memory_roles import MemoryClientWrites, MemoryIngestQueue, MemoryJobs, MemoryWriteBuffer
from statestore.memory_tables import MemoryTables
from statestore.partitions import Partition
from statestore.properties import apply_update, check_combination, validate_properties, validate_values
from statestore.role_defaults import StateReads
from statestore.schema import Schema
from statestore.state import TableState
from statestore.transactions import InitialisePartitions, Transaction

#: how many commits per table :meth:`InMemoryStateStore.changes_since` can answer incrementally
CHANGE_HISTORY = 10_000


class InMemoryStateStore(ComposedStateStore):
    """All tables in process memory, one lock for all commits.

    Attributes:
        tables: the shared dicts and their lock (:class:`~statestore.memory_tables.MemoryTables`).
    """

    def __init__(self) -> None:
        self.tables = tables = MemoryTables()
        queue = MemoryIngestQueue(tables)
        super().__init__(catalog=MemoryCatalog(tables), table_commits=MemoryCommits(tables),
                         job_tracker=MemoryJobs(tables), leases=MemoryLeases(tables), ingest_queue=queue,
                         write_buffer=MemoryWriteBuffer(tables), client_writes=MemoryClientWrites(tables, queue),
                         table_history=MemoryHistory(tables))


class MemoryCatalog:
    """The table catalog of :class:`InMemoryStateStore`."""

    def __init__(self, tables: MemoryTables) -> None:
        self._t = tables

    def create_table(self, name: str, schema: Schema, partitions: Sequence[Partition],
                     properties: Optional[Mapping[str, str]] = None) -> TableInfo:
        props = validate_properties(properties or {})
        t = self._t
        with t.lock:
            if name in t.tables:
                raise TableExistsError(f"table {name!r} already exists")
            info = TableInfo(uuid.uuid4().hex, name, schema, props)
            state = TableState()
            txn = InitialisePartitions(tuple(partitions))
            txn.validate(state)
            txn.apply(state)
            t.tables[name] = info
            t.states[info.table_id] = state
            t.first_states[info.table_id] = state.copy()
            t.history[info.table_id] = []
            t.versions[info.table_id] = 0
            t.changes[info.table_id] = deque(maxlen=CHANGE_HISTORY)
            return info

    def list_tables(self) -> list[TableInfo]:
        with self._t.lock:
            return sorted(self._t.tables.values(), key=lambda t: t.name)

    def get_table(self, name: str) -> TableInfo:
        with self._t.lock:
            try:
                return self._t.tables[name]
            except KeyError:
                raise TableNotFoundError(f"table {name!r} does not exist") from None

    def update_properties(self, name: str, properties: Mapping[str, str]) -> TableInfo:
        props = validate_values(properties)
        with self._t.lock:
            info = self.get_table(name)
            merged = apply_update(info.properties, props)
            check_combination(merged)
            new = TableInfo(info.table_id, info.name, info.schema, merged)
            self._t.tables[name] = new
            return new

    def rename_table(self, old: str, new: str) -> TableInfo:
        with self._t.lock:
            info = self.get_table(old)
            if new in self._t.tables:
                raise TableExistsError(f"table {new!r} already exists")
            renamed = TableInfo(info.table_id, new, info.schema, info.properties)
            del self._t.tables[old]
            self._t.tables[new] = renamed
            return renamed

    def delete_table(self, name: str) -> TableInfo:
        t = self._t
        with t.lock:
            info = self.get_table(name)
            del t.tables[name]
            del t.states[info.table_id]
            for k in [k for k in t.jobs if k[0] == info.table_id]:
                del t.jobs[k]
            for by_table in (t.ingest_requests, t.commit_ids, t.versions, t.changes, t.buffers, t.flushes,
                             t.client_writes, t.first_states, t.history, t.base_numbers):
                by_table.pop(info.table_id, None)
            return info

    def instance_id(self) -> str:
        """This store object's identity: made with it, gone with it (nothing in memory outlives it)."""
        return self._t.instance_id


class MemoryCommits(StateReads):
    """The table commits of :class:`InMemoryStateStore`: a commit applies its transaction
    and its bookkeeping (job record, ingest requests, buffer entries, client write)
    under the one lock."""

    def __init__(self, tables: MemoryTables) -> None:
        self._t = tables

    def commit(self, table_id: str, transaction: Transaction, *, commit_id: Optional[str] = None,
               job: Optional[JobRecord] = None, ingest_job_id: Optional[str] = None,
               buffer_seqs: Sequence[int] = (), client_write: Optional[ClientWrite] = None) -> bool:
        t = self._t
        with t.lock:
            state = t.state(table_id)
            applied = t.commit_ids.setdefault(table_id, {})
            if commit_id is not None and commit_id in applied or t.earlier_write(table_id, client_write):
                return False
            if job is not None:
                check_job_bookkeeping(t.jobs.get((table_id, job.job_id)), job)
            claimed: list[IngestRequest] = []
            if ingest_job_id is not None:
                claimed = [r for r in t.requests(table_id).values()
                           if r.status == "assigned" and r.job_id == ingest_job_id]
                if not claimed:
                    raise BookkeepingError(f"no ingest request of table {table_id} is assigned to job "
                                           f"{ingest_job_id} any more")
            buffered = t.buffers.get(table_id, {})
            gone = [q for q in buffer_seqs if q not in buffered]
            if gone:
                raise BookkeepingError(f"write buffer entries {gone[:5]} of table {table_id} are no longer "
                                       "buffered (flushed by another flush)")
            transaction.validate(state)
            before = fragment_of(state, transaction)
            t.remember(table_id, client_write, transaction.number_in(state))
            transaction.apply(state)
            version = t.versions[table_id] = t.versions[table_id] + 1
            t.history[table_id].append((summarise(version, now_ms(), transaction, before,
                                                  fragment_of(state, transaction),
                                                  job.job_id if job is not None else None), transaction))
            t.changes[table_id].append((version, transaction.touches()))
            applied[commit_id or uuid.uuid4().hex] = now_ms()
            if job is not None:
                t.jobs[(table_id, job.job_id)] = job
            queue = t.ingest_requests.get(table_id, {})
            for r in claimed:
                queue[r.request_id] = r.finished(True)
            if buffer_seqs:
                for q in set(buffer_seqs):
                    del buffered[q]
                t.flushes[table_id] = t.flushes.get(table_id, 0) + 1
            return True

    def prune_commit_ids(self, table_id: str, before_ms: int) -> int:
        with self._t.lock:
            self._t.state(table_id)
            applied = self._t.commit_ids.get(table_id, {})
            old = [c for c, t in applied.items() if t < before_ms]
            for c in old:
                del applied[c]
            return len(old)

    def load_state(self, table_id: str) -> TableState:
        with self._t.lock:
            return self._t.state(table_id).copy()

    def transaction_number(self, table_id: str) -> int:
        """See :meth:`StateStore.transaction_number`: the table's version."""
        with self._t.lock:
            self._t.state(table_id)
            return self._t.versions[table_id]

    def changes_since(self, table_id: str, since: Any = None) -> TableChanges:
        """See :meth:`StateStore.changes_since`: rows the commits since ``since`` touched
        (the last :data:`CHANGE_HISTORY` commits are remembered), else the whole state."""
        t = self._t
        with t.lock:
            state = t.state(table_id)
            info = t.info(table_id)
            version = t.versions[table_id]
            token = ("memory", t.epoch, version)
            held = is_token_of(since, "memory")
            log = t.changes[table_id]
            if held is None or held[0] != t.epoch or not 0 <= held[1] <= version:
                return TableChanges.whole(info, token, state)
            if held[1] == version:
                return TableChanges(info, token, False, tombstones=tuple(state.tombstones.values()))
            if not log or log[0][0] > held[1] + 1:
                return TableChanges.whole(info, token, state)
            pids: set[str] = set()
            names: set[str] = set()
            for v, touched in reversed(log):
                if v <= held[1]:
                    break
                if touched.whole_table:
                    return TableChanges.whole(info, token, state)
                pids |= touched.partition_ids
                names |= touched.filenames
            return TableChanges.of_rows(info, token, state, pids, names)

    def unreferenced_files(self, table_id: str, updated_before_ms: int, limit: int = 1000) -> list[str]:
        with self._t.lock:
            state = self._t.state(table_id)
            out = sorted(f.filename for f in state.files.values()
                         if not state.reference_count(f.filename) and f.update_time < updated_before_ms)
            return out[:limit]
