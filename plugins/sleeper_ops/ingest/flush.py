"""Flushing the write buffer (DESIGN.md sections 3 and 10, seed 004): buffered records
out as sorted files (standard ingest's: :mod:`sleeper_ops.ingest.shared_files`), exactly once.

A flush runs in rounds. Each round reads a snapshot of the oldest buffered entries (at
most ``sleeper.table.write.buffer.flush.records`` records, at least one entry) and
ingests their records as a ``flush`` job with standard ingest
(:class:`~sleeper_ops.ingest.standard.IngestRunner`), whose single add-files commit also
removes exactly those entries from the buffer (``StateStore.commit(...,
buffer_seqs=...)``) and saves the job's record as committed. So at every instant a
buffered record is either still in the buffer or in a committed file, never both and
never neither:

* Killed before the commit: the entries are still buffered; the next flush reads them
  again and writes them under fresh names. The killed attempt's job record named its
  files before they were written and stays ``started``, so the orphan sweep keeps them
  until the job counts as abandoned (``sleeper.table.gc.job.abandon.minutes``) and then
  deletes them; they were never referenced.
* Killed during the commit: the commit applied whole or not at all (the state store's
  transaction); either case is one of the two above.
* Two flushes racing over the same entries: the second commit finds them gone and is
  refused (BookkeepingError, a TransactionError); its files are deleted at once, as
  nothing can have committed them, and the round is tried again on what is left.

A backend may cap the entries one commit removes (DynamoDB: 90, see
``StateStore.buffer_max_flush_entries``); rounds are then smaller.

Rounds stop once the records buffered when the flush began are flushed (writes that
arrive meanwhile may be flushed too, or wait for the next flush), so a flush under a
steady stream of writes ends.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import pyarrow as pa

from sleeper_ops.engine.deletes import covering_entry, filter_batches
from sleeper_ops.ingest.buffer import buffer_limits, decode
from sleeper_ops.ingest.standard import IngestRunner
from sleeper_ops.io.storage import ObjectStore, S3Options
from statestore.buffer import BufferSnapshot, BufferStats
from statestore.catalog import TableInfo
from statestore.deletes import Tombstone
from statestore.errors import BookkeepingError
from statestore.jobs import JobRecord
from statestore.store import StateStore

#: how many times in a row a round may lose its entries to a concurrent flush
MAX_LOST_ROUNDS = 5


@dataclass
class FlushResult:
    """What a flush did: records and buffer entries moved to files, files written,
    rounds committed, rounds lost to a concurrent flush, and the committed jobs' ids."""

    records: int = 0
    entries: int = 0
    files: int = 0
    rounds: int = 0
    lost_rounds: int = 0
    seconds: float = 0.0
    job_ids: list[str] = field(default_factory=list)
    #: the partitions the files were written into (each once)
    partitions: list[str] = field(default_factory=list)
    #: the table's name, for :meth:`summary`
    table: str = ""

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        """One line, for the CLI and the DAG's log; a flush that found nothing says so."""
        if not self.entries and not self.lost_rounds:
            return f"{self.table}: nothing to flush: the write buffer is empty"
        return (f"{self.table}: flushed {self.records:,} records ({self.entries} writes) into {self.files} files in "
                f"{self.rounds} rounds, {self.seconds:.2f}s"
                + (f"; {self.lost_rounds} rounds lost to a concurrent flush" if self.lost_rounds else ""))


def flush_due(stats: BufferStats, now_ms: int, *, flush_records: int, flush_age_seconds: float) -> Optional[str]:
    """Why the buffer should be flushed now (it holds at least ``flush_records``
    records, or its oldest record has waited ``flush_age_seconds``), or None."""
    if stats.rows and stats.rows >= flush_records:
        return f"the buffer holds {stats.rows:,} records (flush at {flush_records:,})"
    if stats.rows and stats.age_seconds(now_ms) >= flush_age_seconds:
        return (f"the oldest buffered record has waited {stats.age_seconds(now_ms):.0f}s "
                f"(flush at {flush_age_seconds:g}s)")
    return None


def _batches(snapshot: BufferSnapshot, tombstones: Sequence[Tombstone]) -> Iterator[pa.RecordBatch]:
    """The entries' records without the rows of the tombstones covering each entry."""
    for entry in snapshot.entries:
        assert entry.data is not None
        yield from filter_batches(decode(entry.data).to_batches(), covering_entry(tombstones, entry.seq))


def flush_buffer(state_store: StateStore, objects: ObjectStore, table: TableInfo, *,
                 run_id: Optional[str] = None, s3: Optional[S3Options] = None, threads: int = 2,
                 max_rows_per_round: Optional[int] = None) -> FlushResult:
    """Flush the table's write buffer (see the module docstring); returns what moved.

    Raises what standard ingest raises (nothing then changes in the buffer), except a
    round refused because a concurrent flush took its entries, which is tried again
    (at most :data:`MAX_LOST_ROUNDS` times in a row).
    """
    start = time.perf_counter()
    result = FlushResult(table=table.name)
    _, per_round, _ = buffer_limits(table)
    per_round = max_rows_per_round or per_round
    target = state_store.buffer_stats(table.table_id).rows
    lost = 0
    while result.records < target:
        snapshot = state_store.read_buffer(table.table_id, max_rows=per_round,
                                           max_entries=state_store.buffer_max_flush_entries)
        if not snapshot.entries:
            break
        # read after the entries: a tombstone committed later numbers above the file's
        # horizon and covers every entry read (statestore.deletes)
        horizon, tombstones = state_store.tombstones(table.table_id)
        job = JobRecord.created(table.table_id, uuid.uuid4().hex, "flush", run_id=run_id)
        runner = IngestRunner(state_store, objects, table, s3=s3, threads=threads, job=job, run_id=run_id,
                              buffer_seqs=snapshot.seqs, max_chunk_rows=max(per_round, snapshot.rows),
                              delete_horizon=horizon)
        try:
            done = runner.ingest_batches(_batches(snapshot, tombstones))
        except BookkeepingError:
            lost += 1
            result.lost_rounds += 1
            if lost >= MAX_LOST_ROUNDS:
                raise
            continue
        lost = 0
        result.records += done.records
        result.entries += len(snapshot.entries)
        result.files += len(done.files)
        result.partitions = list(dict.fromkeys([*result.partitions, *(r.partition_id for r in done.files)]))
        result.rounds += 1
        if done.job_id:
            result.job_ids.append(done.job_id)
    result.seconds = time.perf_counter() - start
    return result
