"""The in-memory store's job tracker, ingest queue, write buffer and client writes: each
a role (:mod:`statestore.roles`) over the store's one
:class:`~statestore.memory_tables.MemoryTables`, holding its lock for each call."""

from __future__ import annotations

from typing import Collection, Iterator, Optional, Sequence

from statestore.buffer import BufferEntry, BufferSnapshot, BufferStats, RecordBlob, full_message
from statestore.client_writes import ClientWrite, ClientWriteRecord
from statestore.clock import now_ms
from statestore.errors import BufferFullError
from statestore.ingest_requests import INGEST_REQUEST_STATUSES, IngestRequest, IngestRequestError, check_new_requests
from statestore.jobs import JobRecord, saves_over
from statestore.memory_tables import MemoryTables


class MemoryJobs:
    """Job records of :class:`~statestore.memory.InMemoryStateStore`."""

    def __init__(self, tables: MemoryTables) -> None:
        self._t = tables

    def put_job(self, record: JobRecord) -> None:
        with self._t.lock:
            self._t.state(record.table_id)
            current = self._t.jobs.get((record.table_id, record.job_id))
            if current is not None and not saves_over(current, record):
                return
            if current is not None and current.heartbeat_ms is not None:
                record = record.beating(current.heartbeat_ms)
            self._t.jobs[(record.table_id, record.job_id)] = record

    def heartbeat_jobs(self, table_id: str, job_ids: Sequence[str], at_ms: int) -> int:
        with self._t.lock:
            self._t.state(table_id)
            beaten = 0
            for job_id in dict.fromkeys(job_ids):
                current = self._t.jobs.get((table_id, job_id))
                if current is not None:
                    self._t.jobs[(table_id, job_id)] = current.beating(at_ms)
                    beaten += 1
            return beaten

    def get_job(self, table_id: str, job_id: str) -> Optional[JobRecord]:
        with self._t.lock:
            return self._t.jobs.get((table_id, job_id))

    def list_jobs(self, table_id: str, *, kind: Optional[str] = None,
                  limit: Optional[int] = 1000) -> list[JobRecord]:
        with self._t.lock:
            jobs = [j for (t, _), j in self._t.jobs.items() if t == table_id and (kind is None or j.kind == kind)]
        jobs.sort(key=lambda j: (j.created_ms, j.job_id), reverse=True)
        return jobs if limit is None else jobs[:limit]

    def open_jobs(self, table_id: str) -> list[JobRecord]:
        with self._t.lock:
            self._t.state(table_id)
            return [j for (t, _), j in self._t.jobs.items() if t == table_id and not j.final]

    def in_flight_outputs(self, table_id: str, active_since_ms: int) -> set[str]:
        with self._t.lock:
            self._t.state(table_id)
            return {o for (t, _), j in self._t.jobs.items() if t == table_id and not j.final
                    and j.last_update_ms >= active_since_ms for o in j.outputs}


class MemoryIngestQueue:
    """The ingest queue of :class:`~statestore.memory.InMemoryStateStore`."""

    def __init__(self, tables: MemoryTables) -> None:
        self._t = tables

    def add_ingest_requests(self, table_id: str, requests: Sequence[IngestRequest], *,
                            client_write: Optional[ClientWrite] = None) -> Optional[ClientWriteRecord]:
        new = check_new_requests(table_id, requests)
        with self._t.lock:
            queue = self._t.requests(table_id)
            earlier = self._t.earlier_write(table_id, client_write)
            if earlier is not None:
                return earlier
            for r in new:
                if r.request_id in queue:
                    raise IngestRequestError(f"ingest request {r.request_id} is already queued")
            for r in new:
                queue[r.request_id] = r
            self._t.remember(table_id, client_write, 0)
            return None

    def pending_ingest_requests(self, table_id: str, limit: Optional[int] = None) -> list[IngestRequest]:
        return self.list_ingest_requests(table_id, status="pending", limit=limit)

    def assign_ingest_requests(self, table_id: str, job_id: str, request_ids: Sequence[str]) -> bool:
        with self._t.lock:
            queue = self._t.requests(table_id)
            ids = list(dict.fromkeys(request_ids))
            if not all(i in queue and queue[i].status == "pending" for i in ids):
                return False
            for i in ids:
                queue[i] = queue[i].assigned(job_id)
            return True

    def finish_ingest_job(self, table_id: str, job_id: str, ok: bool, error: Optional[str] = None, *,
                          max_attempts: Optional[int] = None, counted: bool = True) -> int:
        with self._t.lock:
            queue = self._t.requests(table_id)
            mine = [r for r in queue.values() if r.status == "assigned" and r.job_id == job_id]
            for r in mine:
                queue[r.request_id] = r.finished(ok, error, max_attempts, counted)
            return len(mine)

    def list_ingest_requests(self, table_id: str, *, status: Optional[str] = None,
                             limit: Optional[int] = 1000) -> list[IngestRequest]:
        if status is not None and status not in INGEST_REQUEST_STATUSES:
            raise IngestRequestError(f"unknown ingest request status {status!r}")
        with self._t.lock:
            out = [r for r in self._t.requests(table_id).values() if status is None or r.status == status]
        out.sort(key=lambda r: (r.received_ms, r.request_id))
        return out if limit is None else out[:max(0, limit)]


class MemoryWriteBuffer:
    """The write buffer of :class:`~statestore.memory.InMemoryStateStore` (records only in
    memory: no blobs)."""

    #: no limit on the entries one commit may remove
    buffer_max_flush_entries: Optional[int] = None

    def __init__(self, tables: MemoryTables) -> None:
        self._t = tables

    def append_buffer(self, table_id: str, data: bytes, rows: int, *, max_rows: Optional[int] = None,
                      client_write: Optional[ClientWrite] = None) -> int:
        t = self._t
        with t.lock:
            t.state(table_id)
            earlier = t.earlier_write(table_id, client_write)
            if earlier is not None:
                return earlier.seq
            buffered = t.buffers.setdefault(table_id, {})
            held = sum(e.rows for e in buffered.values())
            if max_rows is not None and held + rows > max_rows:
                raise BufferFullError(full_message(table_id, held, rows, max_rows))
            t.next_seq += 1
            buffered[t.next_seq] = BufferEntry(t.next_seq, rows, now_ms(), bytes(data))
            t.remember(table_id, client_write, t.next_seq)
            return t.next_seq

    def read_buffer(self, table_id: str, *, up_to_seq: Optional[int] = None, max_rows: Optional[int] = None,
                    skip_data: Collection[int] = (), max_entries: Optional[int] = None) -> BufferSnapshot:
        with self._t.lock:
            self._t.state(table_id)
            out: list[BufferEntry] = []
            taken = 0
            for seq in sorted(self._t.buffers.get(table_id, {})):
                if up_to_seq is not None and seq > up_to_seq:
                    break
                if out and ((max_rows is not None and taken >= max_rows)
                            or (max_entries is not None and len(out) >= max_entries)):
                    break
                e = self._t.buffers[table_id][seq]
                out.append(BufferEntry(e.seq, e.rows, e.written_ms, None) if seq in skip_data else e)
                taken += e.rows
            return BufferSnapshot(tuple(out), self._t.flushes.get(table_id, 0))

    def buffer_stats(self, table_id: str) -> BufferStats:
        with self._t.lock:
            self._t.state(table_id)
            entries = self._t.buffers.get(table_id, {}).values()
            return BufferStats(len(entries), sum(e.rows for e in entries),
                               min((e.written_ms for e in entries), default=None), self._t.flushes.get(table_id, 0))

    def buffer_high_water(self, table_id: str) -> int:
        return max(self.read_buffer(table_id).seqs, default=0)

    def record_blobs(self, table_id: str) -> Iterator[RecordBlob]:
        """None: the records are in memory only."""
        return iter(())


class MemoryClientWrites:
    """The client writes' keys of :class:`~statestore.memory.InMemoryStateStore`; a key is
    claimed alone by queuing no ingest requests with it (one atomic step)."""

    def __init__(self, tables: MemoryTables, queue: MemoryIngestQueue) -> None:
        self._t = tables
        self._queue = queue

    def client_write(self, table_id: str, request_id: str) -> Optional[ClientWriteRecord]:
        with self._t.lock:
            self._t.state(table_id)
            return self._t.client_writes.get(table_id, {}).get(request_id)

    def claim_client_write(self, table_id: str, write: ClientWrite) -> Optional[ClientWriteRecord]:
        return self._queue.add_ingest_requests(table_id, (), client_write=write)

    def prune_client_writes(self, table_id: str, before_ms: int) -> int:
        with self._t.lock:
            self._t.state(table_id)
            kept = self._t.client_writes.get(table_id, {})
            old = [k for k, r in kept.items() if r.written_ms < before_ms]
            for k in old:
                del kept[k]
            return len(old)
