"""In-memory state store: the reference model, for unit tests and embedding."""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from typing import Any, Collection, Mapping, Optional, Sequence

from statestore.buffer import BufferEntry, BufferSnapshot, BufferStats, full_message
from statestore.catalog import TableInfo
from statestore.changes import TableChanges, is_token_of
from statestore.client_writes import ClientWrite, ClientWriteRecord
from statestore.errors import BookkeepingError, BufferFullError, TableExistsError, TableNotFoundError
from statestore.history import fragment_of, summarise
from statestore.ingest_requests import INGEST_REQUEST_STATUSES, IngestRequest, IngestRequestError, check_new_requests
from statestore.jobs import JobRecord, check_job_bookkeeping, now_ms, saves_over
from statestore.leases import Lease
from statestore.memory_history import MemoryHistoryMixin
from statestore.memory_leases import MemoryLeasesMixin
from statestore.partitions import Partition
from statestore.properties import apply_update, check_combination, validate_properties, validate_values
from statestore.schema import Schema
from statestore.state import TableState
from statestore.store import StateStore
from statestore.summaries import TransactionSummary
from statestore.transactions import InitialisePartitions, Touches, Transaction

#: how many commits per table :meth:`InMemoryStateStore.changes_since` can answer incrementally
CHANGE_HISTORY = 10_000


class InMemoryStateStore(MemoryHistoryMixin, MemoryLeasesMixin, StateStore):
    """All tables in process memory, one lock for all commits."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tables: dict[str, TableInfo] = {}  # by name
        self._states: dict[str, TableState] = {}  # by table id
        self._jobs: dict[tuple[str, str], JobRecord] = {}
        self._leases: dict[str, Lease] = {}
        self._ingest_requests: dict[str, dict[str, IngestRequest]] = {}  # table id -> id -> request
        self._commit_ids: dict[str, dict[str, int]] = {}  # table id -> commit id -> applied at (ms)
        self._epoch = uuid.uuid4().hex  # tells this store's change tokens from another's
        self._versions: dict[str, int] = {}  # table id -> commits applied
        self._changes: dict[str, deque[tuple[int, Touches]]] = {}  # table id -> (version, what it touched)
        self._buffers: dict[str, dict[int, BufferEntry]] = {}  # table id -> seq -> entry
        self._next_seq = 0  # one sequence for every table, as in PostgreSQL
        self._flushes: dict[str, int] = {}  # table id -> flushes committed
        self._client_writes: dict[str, dict[str, ClientWriteRecord]] = {}  # table id -> key -> record
        # table id -> the state after create_table, and (summary, transaction) of every commit since
        self._first_states: dict[str, TableState] = {}
        self._history: dict[str, list[tuple[TransactionSummary, Optional[Transaction]]]] = {}
        self._base_numbers: dict[str, int] = {}

    def create_table(self, name: str, schema: Schema, partitions: Sequence[Partition],
                     properties: Optional[Mapping[str, str]] = None) -> TableInfo:
        props = validate_properties(properties or {})
        with self._lock:
            if name in self._tables:
                raise TableExistsError(f"table {name!r} already exists")
            info = TableInfo(uuid.uuid4().hex, name, schema, props)
            state = TableState()
            txn = InitialisePartitions(tuple(partitions))
            txn.validate(state)
            txn.apply(state)
            self._tables[name] = info
            self._states[info.table_id] = state
            self._first_states[info.table_id] = state.copy()
            self._history[info.table_id] = []
            self._versions[info.table_id] = 0
            self._changes[info.table_id] = deque(maxlen=CHANGE_HISTORY)
            return info

    def list_tables(self) -> list[TableInfo]:
        with self._lock:
            return sorted(self._tables.values(), key=lambda t: t.name)

    def get_table(self, name: str) -> TableInfo:
        with self._lock:
            try:
                return self._tables[name]
            except KeyError:
                raise TableNotFoundError(f"table {name!r} does not exist") from None

    def update_properties(self, name: str, properties: Mapping[str, str]) -> TableInfo:
        props = validate_values(properties)
        with self._lock:
            info = self.get_table(name)
            merged = apply_update(info.properties, props)
            check_combination(merged)
            new = TableInfo(info.table_id, info.name, info.schema, merged)
            self._tables[name] = new
            return new

    def rename_table(self, old: str, new: str) -> TableInfo:
        with self._lock:
            info = self.get_table(old)
            if new in self._tables:
                raise TableExistsError(f"table {new!r} already exists")
            renamed = TableInfo(info.table_id, new, info.schema, info.properties)
            del self._tables[old]
            self._tables[new] = renamed
            return renamed

    def delete_table(self, name: str) -> TableInfo:
        with self._lock:
            info = self.get_table(name)
            del self._tables[name]
            del self._states[info.table_id]
            for k in [k for k in self._jobs if k[0] == info.table_id]:
                del self._jobs[k]
            self._ingest_requests.pop(info.table_id, None)
            self._commit_ids.pop(info.table_id, None)
            self._versions.pop(info.table_id, None)
            self._changes.pop(info.table_id, None)
            self._buffers.pop(info.table_id, None)
            self._flushes.pop(info.table_id, None)
            self._client_writes.pop(info.table_id, None)
            self._first_states.pop(info.table_id, None)
            self._history.pop(info.table_id, None)
            self._base_numbers.pop(info.table_id, None)
            return info

    def _state(self, table_id: str) -> TableState:
        try:
            return self._states[table_id]
        except KeyError:
            raise TableNotFoundError(f"no table with id {table_id}") from None

    def commit(self, table_id: str, transaction: Transaction, *, commit_id: Optional[str] = None,
               job: Optional[JobRecord] = None, ingest_job_id: Optional[str] = None,
               buffer_seqs: Sequence[int] = (), client_write: Optional[ClientWrite] = None) -> bool:
        with self._lock:
            state = self._state(table_id)
            applied = self._commit_ids.setdefault(table_id, {})
            if commit_id is not None and commit_id in applied or self._earlier_write(table_id, client_write):
                return False
            if job is not None:
                check_job_bookkeeping(self._jobs.get((table_id, job.job_id)), job)
            claimed: list[IngestRequest] = []
            if ingest_job_id is not None:
                claimed = [r for r in self._requests(table_id).values()
                           if r.status == "assigned" and r.job_id == ingest_job_id]
                if not claimed:
                    raise BookkeepingError(f"no ingest request of table {table_id} is assigned to job "
                                           f"{ingest_job_id} any more")
            buffered = self._buffers.get(table_id, {})
            gone = [q for q in buffer_seqs if q not in buffered]
            if gone:
                raise BookkeepingError(f"write buffer entries {gone[:5]} of table {table_id} are no longer "
                                       "buffered (flushed by another flush)")
            transaction.validate(state)
            before = fragment_of(state, transaction)
            self._remember(table_id, client_write, transaction.number_in(state))
            transaction.apply(state)
            version = self._versions[table_id] = self._versions[table_id] + 1
            self._history[table_id].append((summarise(version, int(time.time() * 1000), transaction, before,
                                                      fragment_of(state, transaction),
                                                      job.job_id if job is not None else None), transaction))
            self._changes[table_id].append((version, transaction.touches()))
            applied[commit_id or uuid.uuid4().hex] = int(time.time() * 1000)
            if job is not None:
                self._jobs[(table_id, job.job_id)] = job
            queue = self._ingest_requests.get(table_id, {})
            for r in claimed:
                queue[r.request_id] = r.finished(True)
            if buffer_seqs:
                for q in set(buffer_seqs):
                    del buffered[q]
                self._flushes[table_id] = self._flushes.get(table_id, 0) + 1
            return True

    def in_flight_outputs(self, table_id: str, active_since_ms: int) -> set[str]:
        with self._lock:
            self._state(table_id)
            return {o for (t, _), j in self._jobs.items() if t == table_id and not j.final
                    and j.last_update_ms >= active_since_ms for o in j.outputs}

    def prune_commit_ids(self, table_id: str, before_ms: int) -> int:
        with self._lock:
            self._state(table_id)
            applied = self._commit_ids.get(table_id, {})
            old = [c for c, t in applied.items() if t < before_ms]
            for c in old:
                del applied[c]
            return len(old)

    def load_state(self, table_id: str) -> TableState:
        with self._lock:
            return self._state(table_id).copy()

    def transaction_number(self, table_id: str) -> int:
        """See :meth:`StateStore.transaction_number`: the table's version."""
        with self._lock:
            self._state(table_id)
            return self._versions[table_id]

    def changes_since(self, table_id: str, since: Any = None) -> TableChanges:
        """See :meth:`StateStore.changes_since`: rows the commits since ``since`` touched
        (the last :data:`CHANGE_HISTORY` commits are remembered), else the whole state."""
        with self._lock:
            state = self._state(table_id)
            info = next(t for t in self._tables.values() if t.table_id == table_id)
            version = self._versions[table_id]
            token = ("memory", self._epoch, version)
            held = is_token_of(since, "memory")
            log = self._changes[table_id]
            if held is None or held[0] != self._epoch or not 0 <= held[1] <= version:
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
        with self._lock:
            state = self._state(table_id)
            out = sorted(f.filename for f in state.files.values()
                         if not state.reference_count(f.filename) and f.update_time < updated_before_ms)
            return out[:limit]

    def put_job(self, record: JobRecord) -> None:
        with self._lock:
            self._state(record.table_id)
            current = self._jobs.get((record.table_id, record.job_id))
            if current is not None and not saves_over(current, record):
                return
            if current is not None and current.heartbeat_ms is not None:
                record = record.beating(current.heartbeat_ms)
            self._jobs[(record.table_id, record.job_id)] = record

    def heartbeat_jobs(self, table_id: str, job_ids: Sequence[str], at_ms: int) -> int:
        with self._lock:
            self._state(table_id)
            beaten = 0
            for job_id in dict.fromkeys(job_ids):
                current = self._jobs.get((table_id, job_id))
                if current is not None:
                    self._jobs[(table_id, job_id)] = current.beating(at_ms)
                    beaten += 1
            return beaten

    def get_job(self, table_id: str, job_id: str) -> Optional[JobRecord]:
        with self._lock:
            return self._jobs.get((table_id, job_id))

    def list_jobs(self, table_id: str, *, kind: Optional[str] = None,
                  limit: Optional[int] = 1000) -> list[JobRecord]:
        with self._lock:
            jobs = [j for (t, _), j in self._jobs.items() if t == table_id and (kind is None or j.kind == kind)]
        jobs.sort(key=lambda j: (j.created_ms, j.job_id), reverse=True)
        return jobs if limit is None else jobs[:limit]

    def open_jobs(self, table_id: str) -> list[JobRecord]:
        with self._lock:
            self._state(table_id)
            return [j for (t, _), j in self._jobs.items() if t == table_id and not j.final]

    # ----- ingest requests --------------------------------------------------------------
    def _requests(self, table_id: str) -> dict[str, IngestRequest]:
        self._state(table_id)
        return self._ingest_requests.setdefault(table_id, {})

    def add_ingest_requests(self, table_id: str, requests: Sequence[IngestRequest], *,
                            client_write: Optional[ClientWrite] = None) -> Optional[ClientWriteRecord]:
        new = check_new_requests(table_id, requests)
        with self._lock:
            queue = self._requests(table_id)
            earlier = self._earlier_write(table_id, client_write)
            if earlier is not None:
                return earlier
            for r in new:
                if r.request_id in queue:
                    raise IngestRequestError(f"ingest request {r.request_id} is already queued")
            for r in new:
                queue[r.request_id] = r
            self._remember(table_id, client_write, 0)
            return None

    def _earlier_write(self, table_id: str, write: Optional[ClientWrite]) -> Optional[ClientWriteRecord]:
        """The table's record of ``write``'s key (checked against its digest), or None."""
        if write is None:
            return None
        earlier = self._client_writes.get(table_id, {}).get(write.request_id)
        return None if earlier is None else earlier.answer_for(table_id, write)

    def _remember(self, table_id: str, write: Optional[ClientWrite], seq: int) -> None:
        if write is not None:
            self._client_writes.setdefault(table_id, {})[write.request_id] = ClientWriteRecord(
                write.request_id, write.digest, seq, write.answer, now_ms())

    def client_write(self, table_id: str, request_id: str) -> Optional[ClientWriteRecord]:
        with self._lock:
            self._state(table_id)
            return self._client_writes.get(table_id, {}).get(request_id)

    def prune_client_writes(self, table_id: str, before_ms: int) -> int:
        with self._lock:
            self._state(table_id)
            kept = self._client_writes.get(table_id, {})
            old = [k for k, r in kept.items() if r.written_ms < before_ms]
            for k in old:
                del kept[k]
            return len(old)

    def pending_ingest_requests(self, table_id: str, limit: Optional[int] = None) -> list[IngestRequest]:
        return self.list_ingest_requests(table_id, status="pending", limit=limit)

    def assign_ingest_requests(self, table_id: str, job_id: str, request_ids: Sequence[str]) -> bool:
        with self._lock:
            queue = self._requests(table_id)
            ids = list(dict.fromkeys(request_ids))
            if not all(i in queue and queue[i].status == "pending" for i in ids):
                return False
            for i in ids:
                queue[i] = queue[i].assigned(job_id)
            return True

    def finish_ingest_job(self, table_id: str, job_id: str, ok: bool, error: Optional[str] = None, *,
                          max_attempts: Optional[int] = None) -> int:
        with self._lock:
            queue = self._requests(table_id)
            mine = [r for r in queue.values() if r.status == "assigned" and r.job_id == job_id]
            for r in mine:
                queue[r.request_id] = r.finished(ok, error, max_attempts)
            return len(mine)

    def list_ingest_requests(self, table_id: str, *, status: Optional[str] = None,
                             limit: Optional[int] = 1000) -> list[IngestRequest]:
        if status is not None and status not in INGEST_REQUEST_STATUSES:
            raise IngestRequestError(f"unknown ingest request status {status!r}")
        with self._lock:
            out = [r for r in self._requests(table_id).values() if status is None or r.status == status]
        out.sort(key=lambda r: (r.received_ms, r.request_id))
        return out if limit is None else out[:max(0, limit)]

    # ----- write buffer -----------------------------------------------------------------
    def append_buffer(self, table_id: str, data: bytes, rows: int, *, max_rows: Optional[int] = None,
                      client_write: Optional[ClientWrite] = None) -> int:
        with self._lock:
            self._state(table_id)
            earlier = self._earlier_write(table_id, client_write)
            if earlier is not None:
                return earlier.seq
            buffered = self._buffers.setdefault(table_id, {})
            held = sum(e.rows for e in buffered.values())
            if max_rows is not None and held + rows > max_rows:
                raise BufferFullError(full_message(table_id, held, rows, max_rows))
            self._next_seq += 1
            buffered[self._next_seq] = BufferEntry(self._next_seq, rows, now_ms(), bytes(data))
            self._remember(table_id, client_write, self._next_seq)
            return self._next_seq

    def read_buffer(self, table_id: str, *, up_to_seq: Optional[int] = None, max_rows: Optional[int] = None,
                    skip_data: Collection[int] = (), max_entries: Optional[int] = None) -> BufferSnapshot:
        with self._lock:
            self._state(table_id)
            out: list[BufferEntry] = []
            taken = 0
            for seq in sorted(self._buffers.get(table_id, {})):
                if up_to_seq is not None and seq > up_to_seq:
                    break
                if out and ((max_rows is not None and taken >= max_rows)
                            or (max_entries is not None and len(out) >= max_entries)):
                    break
                e = self._buffers[table_id][seq]
                out.append(BufferEntry(e.seq, e.rows, e.written_ms, None) if seq in skip_data else e)
                taken += e.rows
            return BufferSnapshot(tuple(out), self._flushes.get(table_id, 0))

    def buffer_stats(self, table_id: str) -> BufferStats:
        with self._lock:
            self._state(table_id)
            entries = self._buffers.get(table_id, {}).values()
            return BufferStats(len(entries), sum(e.rows for e in entries),
                               min((e.written_ms for e in entries), default=None), self._flushes.get(table_id, 0))
