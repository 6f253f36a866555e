"""Standard ingest: files in, sorted Parquet files out, one commit.

Records stream from the inputs in bounded memory: they gather into in-memory chunks
(at most ``max_chunk_rows`` rows or ``max_chunk_bytes`` bytes), each chunk is sorted
in Arrow and split by leaf partition. If everything fits in one chunk, its rows go
straight to their data files; otherwise every chunk's runs are spilled to local disk
and each leaf's runs are merged by a streaming sort-preserving merge.
Parquet inputs that together fit one chunk are read key columns first, and the
chunk is sorted while another thread reads the other columns
(:mod:`sleeper_ops.ingest.key_first`). The writing of chunks is
:mod:`sleeper_ops.ingest.chunk_writer`'s.
The result is committed in a single add-files transaction: at most ``threads`` files
shared by the leaves they span (:mod:`sleeper_ops.ingest.shared_files`) when the input
fits in one chunk and sorts on its first row key's prefix, else one data file per leaf
partition with records.

No record is lost or duplicated at the seams (DESIGN.md section 10):

* The ingest is a job (a :class:`~statestore.jobs.JobRecord` of kind ``ingest``) that
  names its output files in its record *before* writing them, so the orphan sweep
  keeps them however long the ingest takes.
* Before the commit every output is checked to exist (HEAD). The commit saves the
  job's record as committed in the same transaction (with ``ingest_job_id``, it also
  marks that job's ingest requests ingested), and a reply lost mid-commit is retried
  by the state store under the commit's id, so it applies once.
* With ``sleeper.table.ingest.max.files.per.leaf`` set, the ingest first waits while
  compaction is behind (:mod:`sleeper_ops.ingest.stall`), after its record is saved and
  before its delete count and partitions are read; giving up fails the job, with nothing
  read or written.
* The job's record is saved (started, naming no outputs yet) before the first input is
  read, so every unfinished job that may commit records is on record from its start
  (a tombstone stays while any job older than it is unfinished: :mod:`statestore.deletes`).
* With ``request_id`` (an idempotency key, :mod:`statestore.client_writes`) the commit
  keeps the key with a digest of the input in its own atomic step. The digest of files
  is their names (absolute paths or ``s3://`` URIs) and sizes, read by the HEAD every
  ingest makes before reading: a retry answers before any input is read (a content
  digest would read every input once more before the retry could answer), and a name
  reused for content of another size is another request. An Arrow table's digest is
  its content. The same key and input answers the first ingest (``repeat``: no new
  files, no records added); the same key with other input is refused with
  :class:`~statestore.client_writes.IdempotencyKeyReusedError`. A repeat that started
  before the first committed writes its own outputs, finds the key held at its commit
  and deletes them (the store's answer is definite: nothing names them).
* Outputs are deleted only when nothing can have committed them: a failure before the
  commit, a definite refusal (:class:`~statestore.errors.TransactionError`), or a
  commit that gave up on conflicts (:class:`~statestore.errors.CommitConflictError`:
  every attempt was rolled back). On an unknown outcome (the state store lost
  mid-commit) they are kept; if the commit did not apply, the orphan sweep removes
  them once the job is failed or abandoned.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Optional, Sequence

import pyarrow as pa

from sleeper_ops.engine.key_order import sorted_leaf_slices
from sleeper_ops.errors import IngestError
from sleeper_ops.heartbeat import Heartbeat
from sleeper_ops.ingest.attempt import IngestAttempt
from sleeper_ops.ingest.chunk_writer import ChunkWriter
from sleeper_ops.ingest.digests import arrow_digest, files_digest
from sleeper_ops.ingest.key_first import ParquetChunk
from sleeper_ops.ingest.shared_files import IngestOutput
from sleeper_ops.ingest.stall import wait_for_compaction
from sleeper_ops.io.datafile import ParquetSettings
from sleeper_ops.io.inputs import check_readable, read_batches
from sleeper_ops.io.storage import ObjectStore, S3Options
from statestore.catalog import TableInfo
from statestore.client_writes import ClientWrite, check_key
from statestore.errors import CommitConflictError, TransactionError
from statestore.files import FileReference
from statestore.jobs import JobRecord
from statestore.partitions import PartitionTree
from statestore.store import StateStore
from statestore.transactions import AddFiles

Progress = Callable[[int], None]  # called with the number of records just read
#: reads an ingest's input and writes its files: (tree, attempt, spill root, result) -> outputs
Reader = Callable[[PartitionTree, IngestAttempt, str, "IngestResult"], list[IngestOutput]]


@dataclass
class IngestResult:
    records: int = 0
    files: list[FileReference] = field(default_factory=list)
    seconds: float = 0.0
    spilled_chunks: int = 0
    job_id: Optional[str] = None
    #: a repeat of an idempotency key: the first ingest's job and records; nothing was added
    repeat: bool = False
    #: seconds spent waiting for compaction before reading (:mod:`sleeper_ops.ingest.stall`), in ``seconds``
    stalled_seconds: float = 0.0

    @property
    def rows_per_second(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def _sliced(batches: Iterable[pa.RecordBatch], most: int) -> Iterable[pa.RecordBatch]:
    """The same rows in batches of at most ``most`` rows, so a chunk never overshoots."""
    for b in batches:
        for start in range(0, b.num_rows, most):
            yield b.slice(start, most)


class IngestRunner:
    """Ingests record batches or files into one table.

    Args:
        job: the job record this ingest runs as (the batcher's); default a fresh one.
        ingest_job_id: mark the ingest requests assigned to this job ``ingested`` in
            the data commit (refused if none is assigned to it any more).
        run_id: recorded on a fresh job record.
        buffer_seqs: write-buffer entries (a flush's input) removed by the data
            commit, which is refused if any of them is gone (:mod:`sleeper_ops.ingest.flush`).
    """

    def __init__(self, state_store: StateStore, objects: ObjectStore, table: TableInfo, *,
                 max_chunk_rows: int = 4_000_000, max_chunk_bytes: int = 512 << 20,
                 spill_dir: Optional[str] = None, s3: Optional[S3Options] = None, threads: int = 2,
                 job: Optional[JobRecord] = None, ingest_job_id: Optional[str] = None,
                 run_id: Optional[str] = None, buffer_seqs: Sequence[int] = (),
                 delete_horizon: Optional[int] = None, request_id: Optional[str] = None):
        """``delete_horizon``: the table's delete count the input was read at, stamped on
        every file written (:mod:`statestore.deletes`); None: read when the ingest starts,
        before its input, so a delete committed while it runs covers its records.
        ``request_id``: the ingest's idempotency key (see the module docstring)."""
        self.request_id = None if request_id is None else check_key(request_id)
        self.state_store, self.objects, self.table = state_store, objects, table
        self.delete_horizon = delete_horizon
        self.schema = table.schema
        self.max_chunk_rows, self.max_chunk_bytes = max_chunk_rows, max_chunk_bytes
        self.spill_dir, self.s3, self.threads = spill_dir, s3, threads
        self.settings = ParquetSettings.for_ingest(table)
        self.writer = ChunkWriter(objects, self.schema, self.settings, threads)
        self.job, self.ingest_job_id, self.run_id = job, ingest_job_id, run_id
        self.buffer_seqs = tuple(buffer_seqs)

    # ----- entry points ---------------------------------------------------------------
    def ingest_files(self, paths: Sequence[str], progress: Optional[Progress] = None) -> IngestResult:
        """Ingest every file in ``paths``; all are checked readable before any is read."""
        if not paths:
            raise IngestError("no input files given")
        located = [(p if p.startswith("s3://") else os.path.abspath(p), check_readable(p, self.s3)) for p in paths]
        return self._ingest(functools.partial(self._read_files, list(paths), progress=progress),
                            files_digest(located))

    def ingest_table(self, table: pa.Table, progress: Optional[Progress] = None) -> IngestResult:
        """Ingest an Arrow table (conformed to the table's schema batch by batch); its
        digest is its content."""
        from sleeper_ops.io.inputs import conform

        digest = arrow_digest(table) if self.request_id is not None else None
        return self.ingest_batches((conform(b, self.schema, "table") for b in table.to_batches()), progress,
                                   digest=digest)

    def ingest_batches(self, batches: Iterable[pa.RecordBatch], progress: Optional[Progress] = None, *,
                       digest: Optional[str] = None) -> IngestResult:
        """Ingest batches already conformed to the table's Arrow schema (see the module
        docstring for what is kept and what is deleted on failure). ``digest``: of the
        request, kept with ``request_id`` (a stream of batches has none: refused)."""
        return self._ingest(functools.partial(self._read_and_write, batches, progress=progress), digest)

    def _ingest(self, read_and_write: Reader, digest: Optional[str]) -> IngestResult:
        """The ingest around ``read_and_write``, which reads the input and writes its
        files (see the module docstring for what is kept and deleted on failure)."""
        start = time.perf_counter()
        write = None
        if self.request_id is not None:
            if digest is None:
                raise IngestError(f"table {self.table.name}: an ingest's request_id needs files or an Arrow table "
                                  "(a stream of batches has no digest before it is read)")
            write = ClientWrite(self.request_id, digest)
            earlier = self._earlier(write)
            if earlier is not None:
                return earlier
        result = IngestResult()
        # on record before the delete count is read: a delete committed after the read covers
        # the files; one committed before it is held while this job is unfinished
        attempt = IngestAttempt(self.state_store, self.table, self.job, self.run_id)
        # beating from here: a wait for compaction may outlast the table's abandon time
        beating = Heartbeat(self.state_store, self.table, [attempt.record.job_id]).start()
        try:
            try:
                result.stalled_seconds = wait_for_compaction(self.state_store, self.table)
                horizon = (self.delete_horizon if self.delete_horizon is not None
                           else self.state_store.tombstones(self.table.table_id)[0])
                tree = PartitionTree(self.state_store.partitions(self.table.table_id))
            except BaseException as e:
                attempt.fail(f"{type(e).__name__}: {e}")
                raise
            first = self._write_and_commit(read_and_write, tree, horizon, attempt, result, write)
            if first is not None:
                return first
        finally:
            beating.stop()
        result.seconds = time.perf_counter() - start
        return result

    def _write_and_commit(self, read_and_write: Reader, tree: PartitionTree, horizon: int, attempt: IngestAttempt,
                          result: IngestResult, write: Optional[ClientWrite]) -> Optional[IngestResult]:
        """Read the input and write its files (deleted again on failure: nothing was
        committed), then commit them; the earlier result when the commit finds the
        request done already (else None, ``result`` filled in)."""
        written: list[IngestOutput] = []
        spill_root = tempfile.mkdtemp(prefix="sleeper-ingest-", dir=self.spill_dir)
        try:
            try:
                written = read_and_write(tree, attempt, spill_root, result)
                refs = [ref for out in written for ref in out.references(horizon)]
                missing = [out.file.key for out in written if self.objects.head(out.file.key) is None]
                if missing:
                    raise IngestError(f"table {self.table.name}: output files vanished before the commit "
                                      f"(swept?): {', '.join(missing[:5])}")
            except BaseException as e:
                self.writer.cleanup(written)  # nothing was committed: the commit was never tried
                attempt.fail(f"{type(e).__name__}: {e}")
                raise
            if refs or attempt.given or self.ingest_job_id is not None:
                first = self._commit(refs, attempt, result.records, written, write)
                if first is not None:
                    return first
            else:  # no records: nothing to commit; the record saved before reading ends final
                done = attempt.record.finished(result.records, 0).committed()
                self.state_store.put_job(replace(done, reason="no records: nothing committed"))
            result.files = refs
            result.job_id = attempt.record.job_id if attempt.saved or attempt.given else None
            return None
        finally:
            shutil.rmtree(spill_root, ignore_errors=True)

    def _read_files(self, paths: list[str], tree: PartitionTree, attempt: IngestAttempt, spill_root: str,
                    result: IngestResult, *, progress: Optional[Progress]) -> list[IngestOutput]:
        """Read the input files and write them: Parquet files that fit one chunk with
        their key columns first, sorted while the other columns are read
        (:mod:`sleeper_ops.ingest.key_first`), others as a stream of batches. The footers
        are read here, after the job's record is saved, so a refusal fails the job."""
        def sort(keys: pa.Table) -> object:
            return sorted_leaf_slices(keys, tree, self.schema) if keys.num_rows else None
        whole = ParquetChunk.of(paths, self.schema, self.s3, max_rows=self.max_chunk_rows,
                                max_bytes=self.max_chunk_bytes)
        read = whole.read(self.schema, self.s3, sort) if whole is not None else None
        if read is None:  # not one chunk of Parquet: a stream of batches, spilled if need be
            batches = (b for p in paths for b in read_batches(p, self.schema, self.s3, table=self.table.name))
            return self._read_and_write(batches, tree, attempt, spill_root, result, progress=progress)
        table, fast = read
        result.records += table.num_rows
        if progress:
            progress(table.num_rows)
        return self.writer.write_sorted(table, fast, tree, attempt) if table.num_rows else []  # type: ignore[arg-type]

    def _read_and_write(self, batches: Iterable[pa.RecordBatch], tree: PartitionTree, attempt: IngestAttempt,
                        spill_root: str, result: IngestResult, *,
                        progress: Optional[Progress]) -> list[IngestOutput]:
        """Read every batch into sorted chunks (spilled when more than one) and write
        the data files (:class:`~sleeper_ops.ingest.chunk_writer.ChunkWriter`)."""
        runs: dict[str, list[str]] = {}  # leaf id -> spilled run paths
        chunk: list[pa.RecordBatch] = []
        rows = nbytes = 0
        chunks_seen = 0
        for b in _sliced(batches, self.max_chunk_rows):
            if chunk and (rows + b.num_rows > self.max_chunk_rows or nbytes + b.nbytes > self.max_chunk_bytes):
                self.writer.spill(chunk, tree, spill_root, chunks_seen, runs)
                chunks_seen += 1
                chunk, rows, nbytes = [], 0, 0
            chunk.append(b)
            rows += b.num_rows
            nbytes += b.nbytes
            result.records += b.num_rows
            if progress:
                progress(b.num_rows)
        if chunks_seen == 0:
            return self.writer.write_direct(chunk, tree, attempt) if rows else []
        if chunk:
            self.writer.spill(chunk, tree, spill_root, chunks_seen, runs)
            chunks_seen += 1
        del chunk  # the last chunk is in its runs now: not held through the merge
        result.spilled_chunks = chunks_seen
        return self.writer.merge_runs(runs, attempt)

    def _earlier(self, write: ClientWrite) -> Optional[IngestResult]:
        """The first ingest of ``write``'s key as a repeat's answer (None: the key is not
        held); IdempotencyKeyReusedError for other input."""
        record = self.state_store.client_write(self.table.table_id, write.request_id)
        if record is None:
            return None
        record.answer_for(self.table.table_id, write)
        job = self.state_store.get_job(self.table.table_id, record.answer) if record.answer else None
        return IngestResult(records=job.rows_written if job is not None else 0, job_id=record.answer or None,
                            repeat=True)

    def _commit(self, refs: list[FileReference], attempt: IngestAttempt, records: int,
                written: list[IngestOutput], write: Optional[ClientWrite]) -> Optional[IngestResult]:
        """One add-files commit with the job's bookkeeping; outputs deleted only on a
        refusal, or when the key was found held by another ingest (then returns that
        first ingest's answer)."""
        done = attempt.record.finished(records, records, refs[0].filename if len(refs) == 1 else None).committed()
        keyed = None if write is None else replace(write, answer=done.job_id)
        try:
            applied = self.state_store.commit(self.table.table_id, AddFiles(tuple(refs)), job=done,
                                              ingest_job_id=self.ingest_job_id, buffer_seqs=self.buffer_seqs,
                                              client_write=keyed)
        except (TransactionError, CommitConflictError) as e:
            self.writer.cleanup(written)
            attempt.fail(f"commit refused: {e}")
            raise
        except BaseException as e:
            # the outcome may be unknown: keep the outputs (the sweep removes them if it did not apply)
            attempt.fail(f"commit failed: {type(e).__name__}: {e}")
            raise
        if applied or write is None:
            return None
        first = self._earlier(write)
        if first is None or first.job_id == done.job_id:
            return None  # this ingest's own commit, applied by a try whose reply was lost
        self.writer.cleanup(written)  # the key is another ingest's: nothing names these outputs
        attempt.fail(f"a repeat of idempotency key {write.request_id!r}: job {first.job_id} ingested this input")
        return first
