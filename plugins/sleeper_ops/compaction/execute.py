"""Running one compaction job: merge, filter, iterate, write, commit.

:func:`execute_job` streams a sort-preserving merge of the job's input files
(DataFusion, sort order declared, so memory stays flat however big the inputs),
keeps only rows inside the job's partition when some input covers more than it,
applies the table's iterators to the Arrow batches and writes one sorted output
file plus its sketches under the key it is given (named in the job's record first,
see :func:`start_attempt`). It changes no state. A job with no iterators (the usual
one: whole files or a leaf's range of shared ones, with tombstones or not) needs no
row in Python: DataFusion decodes, merges and writes the file itself, with the same
Parquet settings, on every core. Its sketches are the inputs' merged when it reads
whole files and drops nothing, else built from the row keys as DataFusion writes them
(on a thread of their own), and must count exactly the file's rows. Jobs with
iterators pass their rows through them and pyarrow's writer (its encoding on one
thread, the merge running ahead on another), as do codecs DataFusion cannot match.

:func:`commit_job` checks the output exists (HEAD), then replaces the inputs'
references with the output's in one :class:`ReplaceFileReferences` commit that also
saves the job's record as committed. The state store refuses it, changing nothing,
when the inputs no longer carry the job id (another attempt of the job committed
first) or the job's record names another attempt's output (a retry took the job
over); the refused attempt's output is then deleted and the refusal reported. So a
retried or duplicated job never duplicates records. On an unknown outcome (the state
store lost mid-commit) the output is kept: the orphan sweep removes it if the commit
did not apply.

:func:`run_job` does both and keeps the job's status record up to date.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from sleeper_ops.compaction.jobs import CompactionJob
from sleeper_ops.engine.deletes import covers_whole, key_bounds
from sleeper_ops.engine.iterators import BatchFn, IteratorChain
from sleeper_ops.engine.merge import merge_sorted, merge_sorted_to_file
from sleeper_ops.errors import CompactionError
from sleeper_ops.heartbeat import Heartbeat
from sleeper_ops.io.datafile import (
    DataFileWriter,
    ParquetSettings,
    WrittenFile,
    datafusion_writer_options,
    new_data_key,
    read_sketches,
    sketch_key,
)
from sleeper_ops.io.sketches import RowKeySketches
from sleeper_ops.io.storage import ObjectStore
from statestore.catalog import TableInfo
from statestore.deletes import Tombstone
from statestore.errors import CommitConflictError, TransactionError
from statestore.files import FileReference
from statestore.jobs import JobRecord
from statestore.region import Region
from statestore.roles import JobTracker, TableCommits
from statestore.schema import Schema
from statestore.store import StateStore
from statestore.transactions import ReplaceFileReferences

#: Called with the number of rows just read (increments), from the thread running the job.
RowsCallback = Callable[[int], None]


@dataclass(frozen=True)
class JobOutput:
    """What :func:`execute_job` wrote: ``output`` is None when no records remained."""

    job: CompactionJob
    output: Optional[WrittenFile]
    rows_read: int
    rows_written: int
    seconds: float


@dataclass(frozen=True)
class JobResult:
    """The end of one job: committed, refused (another attempt won) or failed."""

    job: CompactionJob
    status: str  # committed | refused | failed
    rows_read: int = 0
    rows_written: int = 0
    seconds: float = 0.0
    output: Optional[str] = None
    reason: Optional[str] = None

    @property
    def rate(self) -> float:
        return self.rows_read / self.seconds if self.seconds > 0 else 0.0


def _region_of(state_store: TableCommits, table: TableInfo, partition_id: str) -> Region:
    for p in state_store.partitions(table.table_id):
        if p.id == partition_id:
            return p.region
    raise TransactionError(f"partition {partition_id} does not exist")


def _not_wholly_deleted(job: CompactionJob, schema: Schema,
                        objects: ObjectStore) -> tuple[list[str], list[tuple[Tombstone, ...]]]:
    """The job's inputs with the tombstones to apply to each, leaving out inputs a
    tombstone without a predicate covers whole (by the Parquet statistics of the first
    row key field): those are dropped by reference, never read."""
    inputs, deletes = [], []
    for name, tombstones in zip(job.inputs, job.input_tombstones()):
        if tombstones and any(t.where is None for t in tombstones):
            with objects.open_input(name) as f:
                bounds = key_bounds(pq.ParquetFile(f).metadata, schema.row_key_names[0])
            if covers_whole(tombstones, schema, bounds):
                continue
        inputs.append(name)
        deletes.append(tombstones)
    return inputs, deletes


def start_attempt(state_store: JobTracker, table: TableInfo, job: CompactionJob,
                  run_id: Optional[str] = None) -> JobRecord:
    """Record a new attempt of ``job`` as started, naming the output key it will write
    (the record's ``outputs``); saved before anything is written. Returns the record."""
    rec = state_store.get_job(table.table_id, job.job_id) or JobRecord.created(
        table.table_id, job.job_id, "compaction", partition_id=job.partition_id, input_files=len(job.inputs))
    rec = rec.started(run_id, outputs=[new_data_key(table.table_id, job.partition_id)])
    state_store.put_job(rec)
    return rec


def execute_job(job: CompactionJob, table: TableInfo, objects: ObjectStore, *,
                region: Optional[Region] = None, iterators: Sequence[BatchFn] = (),
                on_rows: Optional[RowsCallback] = None, batch_size: int = 16384,
                output_key: Optional[str] = None, python_modules: Sequence[str] = ()) -> JobOutput:
    """Merge the job's inputs into one new file under ``output_key`` (default a fresh
    key; jobs run for real pass the key their record names) (see the module docstring).

    ``region`` (the job's partition) is needed unless ``job.whole_files``. Every
    input must exist, and with exact input counts the merge must read exactly
    that many records; otherwise :class:`CompactionError` and nothing is written.
    On any failure the partial output is deleted before the error propagates.
    """
    started = time.perf_counter()
    schema = table.schema
    chain = IteratorChain.for_table(table, iterators, python_modules=python_modules)
    if not job.whole_files and region is None:
        raise ValueError(f"job {job.job_id}: a region is needed when inputs are not whole files")
    missing = [f for f in job.inputs if objects.head(f) is None]
    if missing:
        raise CompactionError(f"job {job.job_id}: input files missing from storage: {', '.join(missing)}")
    inputs, deletes = _not_wholly_deleted(job, schema, objects)
    if not inputs:  # every input's rows are deleted: the references go, nothing is read or written
        return JobOutput(job, None, 0, 0, time.perf_counter() - started)
    paths, store, url = objects.datafusion_paths(inputs)
    key = output_key or new_data_key(table.table_id, job.partition_id)
    # Whole input files with no iterators: the output holds exactly the inputs' keys,
    # so merging their sketches gives the output's sketch without touching each key.
    reuse_sketches = job.whole_files and chain.is_empty and not job.tombstones
    only = None if job.whole_files else region
    options = datafusion_writer_options(ParquetSettings.of(table), schema) if chain.is_empty else None
    if options is not None:
        return _merge_in_datafusion(job, table, objects, _Merge(paths, store, url, only, deletes, batch_size), key,
                                    options, reuse_sketches, on_rows, started)
    merged = merge_sorted(paths, schema, region=only, object_store=store, store_url=url, batch_size=batch_size,
                          deletes=deletes)
    rows_read = 0

    def counted() -> Iterator[pa.RecordBatch]:
        nonlocal rows_read
        for b in merged:
            rows_read += b.num_rows
            if on_rows is not None:
                on_rows(b.num_rows)
            yield b

    stream = counted() if chain.is_empty else chain.apply(counted())
    writer = DataFileWriter(objects, key, schema, ParquetSettings.of(table), sketch_rows=not reuse_sketches)
    try:
        for batch in stream:
            writer.write(batch)
        _check_count(job, rows_read)
        if writer.rows == 0:
            writer.abort()
            return JobOutput(job, None, rows_read, 0, time.perf_counter() - started)
        if reuse_sketches:
            writer.sketches = _merged_sketches(objects, table, job.inputs)
        written = writer.close()
    except BaseException:
        merged.close()  # stops the merge's read-ahead thread
        writer.abort()
        raise
    return JobOutput(job, written, rows_read, written.record_count, time.perf_counter() - started)


@dataclass(frozen=True)
class _Merge:
    """What DataFusion merges: the inputs (as :meth:`ObjectStore.datafusion_paths` gives
    them), the region to keep (None: all) and each input's tombstones."""

    paths: list[str]
    store: Any
    url: Optional[str]
    region: Optional[Region]
    deletes: list[tuple[Tombstone, ...]]
    batch_size: int


def _merge_in_datafusion(job: CompactionJob, table: TableInfo, objects: ObjectStore, merge: _Merge, key: str,
                         options: Any, reuse_sketches: bool, on_rows: Optional[RowsCallback],
                         started: float) -> JobOutput:
    """The merge decoded, merged and written by DataFusion to ``key`` on every core, its
    sketches beside it: the inputs' merged when ``reuse_sketches`` (the output holds
    exactly their rows), else built from the row keys of the rows written, as they are
    written (each field's sketch must count exactly the file's rows). Rows are counted
    from the written footer (``on_rows`` told once, at the end). On any failure, or no
    rows, nothing is left under ``key``."""
    (output,), _, _ = objects.datafusion_paths([key])
    built = None if reuse_sketches else RowKeySketches(table.schema)
    try:
        objects.prepare_output(key)
        merge_sorted_to_file(merge.paths, table.schema, output, options, region=merge.region, deletes=merge.deletes,
                             on_keys=None if built is None else built.update, object_store=merge.store,
                             store_url=merge.url, batch_size=merge.batch_size)
        with objects.open_input(key) as f:
            rows = pq.ParquetFile(f).metadata.num_rows
        if on_rows is not None:
            on_rows(rows)
        _check_count(job, rows)
        if rows == 0:
            objects.delete(key)
            return JobOutput(job, None, 0, 0, time.perf_counter() - started)
        if built is None:
            sketches = _merged_sketches(objects, table, job.inputs)
        else:
            counted = {name: sk.count for name, sk in built.fields.items() if sk.count != rows}
            if counted:
                raise CompactionError(f"job {job.job_id}: the sketches of {key} count {counted} rows, "
                                      f"but the file holds {rows}")
            sketches = built
        objects.put(sketch_key(key), sketches.to_bytes())
    except BaseException:
        objects.delete(key)
        objects.delete(sketch_key(key))
        raise
    return JobOutput(job, WrittenFile(key, rows, sketches), rows, rows, time.perf_counter() - started)


def _check_count(job: CompactionJob, rows: int) -> None:
    """CompactionError when the job's references count its inputs exactly and ``rows``,
    the rows its merge read, differ."""
    if job.exact_count and rows != job.input_records:
        raise CompactionError(f"job {job.job_id}: read {rows} records, "
                              f"but the inputs' references count {job.input_records}")


def _merged_sketches(objects: ObjectStore, table: TableInfo, inputs: Sequence[str]) -> RowKeySketches:
    merged = RowKeySketches(table.schema)
    for f in inputs:
        merged.merge(read_sketches(objects, table.schema, f))
    return merged


def commit_job(state_store: TableCommits, objects: ObjectStore, out: JobOutput,
               done: Optional[JobRecord] = None) -> Optional[str]:
    """Commit ``out`` (with ``done``, the job's committed record, in the same state-store
    transaction); returns None when committed, else why it was refused (the output is
    then deleted, and the state is unchanged). Raises on an unknown outcome, keeping
    the output."""
    job = out.job
    new_ref = None
    if out.output is not None:
        if objects.head(out.output.key) is None:
            return f"output {out.output.key} vanished before the commit"
        new_ref = FileReference(out.output.key, job.partition_id, out.output.record_count,
                                delete_horizon=job.delete_horizon)
    # no caller commit id: every attempt writes a fresh output and commits once; a reply
    # lost mid-commit is retried inside commit() under the id it made
    try:
        state_store.commit(job.table_id, ReplaceFileReferences(job.job_id, job.partition_id, job.inputs, new_ref),
                           job=done)
    except (TransactionError, CommitConflictError) as e:
        if out.output is not None:
            objects.delete(out.output.key)
            objects.delete(sketch_key(out.output.key))
        return str(e)
    return None


def run_job(state_store: StateStore, objects: ObjectStore, table: TableInfo, job: CompactionJob, *,
            region: Optional[Region] = None, iterators: Sequence[BatchFn] = (), run_id: Optional[str] = None,
            on_rows: Optional[RowsCallback] = None, python_modules: Sequence[str] = ()) -> JobResult:
    """Execute and commit one job, recording started/finished/committed or failed.
    ``region`` is the job partition's, looked up when not given and needed;
    ``python_modules``: where the table's Python iterator may come from."""
    rec = start_attempt(state_store, table, job, run_id)
    with Heartbeat(state_store, table, [rec.job_id]):
        try:
            if region is None and not job.whole_files:
                region = _region_of(state_store, table, job.partition_id)
            out = execute_job(job, table, objects, region=region, iterators=iterators, on_rows=on_rows,
                              output_key=rec.outputs[0], python_modules=python_modules)
        except Exception as e:
            reason = f"{type(e).__name__}: {e}"
            state_store.put_job(rec.failed(reason))
            return JobResult(job, "failed", reason=reason)
        return record_commit(state_store, objects, rec, out)


def record_commit(state_store: StateStore, objects: ObjectStore, rec: JobRecord, out: JobOutput) -> JobResult:
    """Commit an executed job, its record saved committed in the same transaction, and
    record any other outcome in its status record. A losing attempt's records are
    ignored by the state store once the winner's says committed."""
    output_key = out.output.key if out.output is not None else None
    rec = rec.finished(out.rows_read, out.rows_written, output_key)
    job = out.job
    try:
        state_store.put_job(rec)
        refused = commit_job(state_store, objects, out, rec.committed())
    except Exception as e:
        reason = f"commit failed: {type(e).__name__}: {e}"
        _put_quietly(state_store, rec.failed(reason))
        return JobResult(job, "failed", out.rows_read, out.rows_written, out.seconds, output_key, reason)
    if refused is not None:
        reason = f"commit refused: {refused}"
        _put_quietly(state_store, rec.failed(reason))
        return JobResult(job, "refused", out.rows_read, out.rows_written, out.seconds, None, reason)
    return JobResult(job, "committed", out.rows_read, out.rows_written, out.seconds, output_key)


def _put_quietly(state_store: JobTracker, rec: JobRecord) -> None:
    """Save a failure record; if the store is lost too, the record stays as it was
    (the job is then treated as abandoned once it shows no progress)."""
    try:
        state_store.put_job(rec)
    except Exception:  # the job's outcome is already decided and reported
        pass
