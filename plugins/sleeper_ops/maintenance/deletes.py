"""Deleting records (issue 22): :func:`delete_records` commits one
:class:`~statestore.transactions.DeleteRecords` transaction, and
:func:`drop_spent_tombstones` forgets tombstones nothing they cover holds any more.

The rule of what a delete removes is in :mod:`statestore.deletes`: every matching
record of a file committed before it, of an ingest job or bulk import already reading
when it commits, and of every write to the buffer that returned before it was asked;
records of a write, ingest job or bulk import that starts after it stay. Readers hide
the records at once; compaction removes them from the files
(``sleeper.table.delete.purge.hours`` bounds how long that may take).

A delete may carry an idempotency key (REST ``Idempotency-Key``, ``--request-id``),
kept with a digest of what it deletes (its regions and ``where``) in the delete's own
commit (:mod:`statestore.client_writes`): within ``sleeper.table.write.idempotency.hours``
the same key and request adds no second tombstone and answers the first one's number;
the same key with other keys, ranges or predicate is refused with
:class:`~statestore.client_writes.IdempotencyKeyReusedError`, naming the key.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from sleeper_ops.engine.deletes import DeleteInputError, check_where
from sleeper_ops.engine.key_regions import exact_key_region, range_region
from sleeper_ops.errors import QueryError
from statestore import clock
from statestore.catalog import TableInfo
from statestore.client_writes import ClientWrite, check_key, digest_of
from statestore.errors import NotSupportedError
from statestore.properties import GC_JOB_ABANDON_MINUTES
from statestore.region import Region
from statestore.schema import Schema
from statestore.state import TableState
from statestore.store import StateStore
from statestore.transactions import DeleteRecords, DropTombstones


@dataclass(frozen=True)
class DeleteResult:
    """One delete: its tombstone's number (a repeat of an idempotency key: the first
    delete's, ``repeat`` True), the buffer sequence number it covers up to, and what it
    matches."""

    tombstone: Optional[int]
    buffer_seq: int
    regions: tuple[Region, ...]
    where: Optional[str]
    repeat: bool = False

    @property
    def applied(self) -> bool:
        """Whether this call committed the delete (False for a repeat of its key)."""
        return self.tombstone is not None and not self.repeat

    def summary(self) -> str:
        if self.repeat:
            return (f"delete {self.tombstone} was committed before (a repeat of this idempotency key): "
                    "nothing more to do")
        return (f"delete {self.tombstone} committed: matching records are hidden from every read now and "
                "purged from files by compaction")

    def to_dict(self) -> dict[str, Any]:
        return {"tombstone": self.tombstone, "applied": self.applied, "repeat": self.repeat,
                "buffer_seq": self.buffer_seq, "regions": [r.to_dict() for r in self.regions], "where": self.where}


def delete_regions(schema: Schema, keys: Sequence[Any] = (),
                   ranges: Sequence[tuple[Any, Optional[Any]]] = ()) -> tuple[Region, ...]:
    """The regions of ``keys`` (a value or a tuple of row key values) and ``ranges``
    (``[lo, hi)`` on the first row key field; ``hi`` None: unbounded). Raises
    :class:`DeleteInputError` in one line for none, a bad value, or an empty or
    inverted range."""
    out: list[Region] = []
    try:
        for k in keys:
            out.append(exact_key_region(schema, list(k) if isinstance(k, (tuple, list)) else [k]))
        for lo, hi in ranges:
            out.append(range_region(schema, lo, hi))
    except DeleteInputError:
        raise
    except QueryError as e:
        raise DeleteInputError(str(e)) from None
    if not out:
        raise DeleteInputError("give a key or a range to delete (--key K or --range LO HI)")
    return tuple(out)


def delete_records(state_store: StateStore, table: TableInfo, *, keys: Sequence[Any] = (),
                   ranges: Sequence[tuple[Any, Optional[Any]]] = (), where: Optional[str] = None,
                   request_id: Optional[str] = None) -> DeleteResult:
    """Delete the records with ``keys`` or in ``ranges`` (and matching ``where``, an
    SQL predicate on any fields) committed before this call, in one commit."""
    regions = delete_regions(table.schema, keys, ranges)
    where = check_where(table.schema, where)
    # the answer names this call, so a retry of its own commit (a lost reply) is told from a repeat
    write = None if request_id is None else ClientWrite(check_key(request_id), delete_digest(regions, where),
                                                         answer=uuid.uuid4().hex)
    seq = state_store.buffer_high_water(table.table_id)
    state_store.commit(table.table_id, DeleteRecords(regions, where, seq), client_write=write)
    if write is not None:  # the key's record holds the tombstone number of its first delete
        record = state_store.client_write(table.table_id, write.request_id)
        if record is not None:
            return DeleteResult(record.seq, seq, regions, where, repeat=record.answer != write.answer)
    # the newest tombstone of this content is ours (another delete may have followed)
    count, live = state_store.tombstones(table.table_id)
    mine = [t.number for t in live if t.regions == regions and t.where == where and t.buffer_seq == seq]
    return DeleteResult(max(mine) if mine else count, seq, regions, where)


def delete_digest(regions: Sequence[Region], where: Optional[str]) -> str:
    """The digest of a delete's request, kept with its idempotency key: its regions
    (in order) and predicate."""
    return digest_of("delete", json.dumps([r.to_dict() for r in regions], sort_keys=True, default=repr).encode(),
                     (where or "").encode(), b"1" if where is not None else b"0")


def spent_tombstones(state: TableState, buffer_seqs: Sequence[int], *, running_since_ms: Optional[int] = None,
                     now_ms: int, settle_ms: int) -> list[int]:
    """The tombstones no longer covering any data: no reference with a horizon below
    the tombstone's number lies in a partition meeting its regions, no buffer entry (of
    ``buffer_seqs``, the buffer's entries now) is numbered at most its ``buffer_seq``, no
    job still running began before it (``running_since_ms``: when the oldest did; an
    ingest or bulk import that read before the delete commits files it covers), and it
    is at least ``settle_ms`` old (a job that keeps no record has ended by then)."""
    lowest_entry = min(buffer_seqs, default=None)
    out = []
    for t in state.tombstones.values():
        if lowest_entry is not None and lowest_entry <= t.buffer_seq:
            continue
        if (running_since_ms is not None and running_since_ms <= t.created_ms) or now_ms - t.created_ms < settle_ms:
            continue
        covered = any(t.covers_file(r.delete_horizon)
                      and any(g.overlaps(state.partitions[r.partition_id].region) for g in t.regions)
                      for r in state.references.values())
        if not covered:
            out.append(t.number)
    return sorted(out)


def drop_spent_tombstones(state_store: StateStore, table: TableInfo, now_ms: Optional[int] = None) -> list[int]:
    """Forget the table's spent tombstones (:func:`spent_tombstones`; settled after
    ``sleeper.table.gc.job.abandon.minutes``); returns their numbers.

    Every job not yet final counts, however many jobs came after it
    (:meth:`~statestore.store.StateStore.open_jobs`): one that began before a
    tombstone keeps it. A job silent for the abandon time is declared abandoned first
    (:meth:`~statestore.jobs.JobRecord.abandoned`): its attempt can no longer commit,
    so it holds nothing up; a job that commits before that save is committed, and its
    files are in the state read after it. The jobs and the buffer are read before the
    state, so a job or an entry that commits files in between is seen either way
    (still open or buffered, or in a file the state names)."""
    if not state_store.tombstones(table.table_id)[1]:
        return []
    now = clock.now_ms() if now_ms is None else now_ms
    abandon_minutes = table.get_int(GC_JOB_ABANDON_MINUTES)
    running = []
    # an export writes outside the table, never files a tombstone could cover: it holds nothing up
    for job in state_store.open_jobs(table.table_id):
        if job.kind == "export":
            continue
        if now - job.last_update_ms >= abandon_minutes * 60_000:
            state_store.put_job(job.abandoned(abandon_minutes, now))
            stored = state_store.get_job(table.table_id, job.job_id)
            if stored is None or stored.final:
                continue  # fenced (its commit is refused), or committed meanwhile (its files in the state)
            job = stored  # a new attempt started meanwhile: it is running
        running.append(job.created_ms)
    try:
        seqs = state_store.read_buffer(table.table_id).seqs
    except NotSupportedError:
        seqs = ()
    state = state_store.load_state(table.table_id)
    spent = spent_tombstones(state, seqs, running_since_ms=min(running, default=None), now_ms=now,
                             settle_ms=abandon_minutes * 60_000)
    if spent:
        state_store.commit(table.table_id, DropTombstones(tuple(spent)))
    return spent
