"""A bulk import job: plan, record, run (on Spark, through a runner), commit once.

:func:`bulk_import` imports every file the sources name into a table in one add-files
commit, with the no-loss rules of DESIGN.md section 10:

* **Idempotent by import key.** The job's id is derived from the table and the import
  key (default: a fresh one), and the commit keeps the key with a digest of the
  request's sources (as given: local paths made absolute, ``s3://`` URIs as they are;
  :mod:`statestore.client_writes`) in its own atomic step. A key whose job is already
  committed imports nothing (status ``already imported``), before any Spark work; the
  key with other sources is refused in one line naming the key
  (:class:`~statestore.client_writes.IdempotencyKeyReusedError`), before Spark if the
  first has committed, else at the commit (its files are then deleted). An attempt
  racing its own key is refused by the state store at its commit (the job's record is
  committed, or names another attempt's outputs) and its files are deleted. So a
  retried or repeated import of the same key adds every record exactly once.
* **Outputs named first.** Every attempt names its outputs -- one key per leaf
  partition, ``bulk-<job>-a<attempt>-<nonce>``, so no two attempts share a key, even
  two racing with the same attempt number -- in the job's record before the Spark job
  starts, so the orphan sweep never takes them for orphans while the job runs. Each
  attempt of a Spark task writes a key of its own named after one of those
  (:mod:`sleeper_ops.io.attempts`), which the record's name covers; the runner returns
  the keys of the attempts whose results reached it, and those are committed. The
  outputs of an import attempt that was superseded are left to the orphan sweep (its commit may be landing as it is
  superseded; if it landed they are tracked and kept, else swept); its scratch runs,
  which nothing references, are deleted by the new attempt.
* **One commit**, after every output is checked to exist, saving the job's record as
  committed in the same state-store transaction. Outputs (with every task attempt's)
  are deleted when nothing can have committed them (the run failed, or the commit was
  refused); on an unknown outcome they are kept for the orphan sweep. Outputs of
  losing task attempts that finished too are never committed: once the job is final
  they are orphans, for the sweep.

Tables with too few leaves are pre-split first (:mod:`sleeper_ops.bulk_import.presplit`).
The run itself -- read, tag rows with their leaf, repartition by leaf, sort and write
one file per leaf -- is the ``run`` callable's (:mod:`sleeper_ops.spark.bulk_driver`).
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from sleeper_ops.bulk_import.presplit import presplit
from sleeper_ops.bulk_import.sources import expand_sources
from sleeper_ops.errors import IngestError
from sleeper_ops.heartbeat import Heartbeat
from sleeper_ops.io.attempts import attempt_objects
from sleeper_ops.io.datafile import sketch_key
from sleeper_ops.io.storage import ObjectStore, S3Options
from sleeper_ops.maintenance.gc import scratch_root
from statestore.catalog import TableInfo
from statestore.client_writes import ClientWrite, IdempotencyKeyReusedError, digest_of
from statestore.errors import BookkeepingError, CommitConflictError, TransactionError
from statestore.files import FileReference
from statestore.jobs import JobRecord
from statestore.partitions import Partition
from statestore.roles import JobTracker
from statestore.store import StateStore
from statestore.transactions import AddFiles


@dataclass(frozen=True)
class ImportPlan:
    """What a runner needs: the table, the files, the partition tree and, per leaf, the
    key its file must be written under (see :func:`output_key`)."""

    table: TableInfo
    job_id: str
    attempt: str
    files: tuple[str, ...]
    partitions: tuple[Partition, ...]
    output_keys: dict[str, str]
    #: each file's size in bytes, in the order of ``files`` (empty: unknown)
    file_bytes: tuple[int, ...] = ()


@dataclass(frozen=True)
class LeafOutput:
    """One file a runner wrote: the leaf, its key and how many records it holds."""

    leaf_id: str
    key: str
    records: int


Runner = Callable[[ImportPlan], Sequence[LeafOutput]]


@dataclass
class BulkImportResult:
    """The end of one bulk import: ``committed``, ``already imported`` (the key was
    committed before; nothing added) or ``failed``."""

    table: str
    import_key: str
    job_id: str
    status: str
    files_read: int = 0
    records: int = 0
    files_written: list[str] = field(default_factory=list)
    seconds: float = 0.0
    presplits: int = 0
    reason: Optional[str] = None
    #: the leaf partitions the files were written into (in the order of ``files_written``)
    partitions: list[str] = field(default_factory=list)

    @property
    def rows_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        if self.status == "already imported":
            return f"{self.table}: import key {self.import_key!r} was already imported; nothing added"
        if self.status != "committed":
            return f"{self.table}: bulk import {self.import_key!r} failed: {self.reason}"
        return (f"{self.table}: bulk import {self.import_key!r} committed {self.records:,} records from "
                f"{self.files_read} files into {len(self.files_written)} files in {self.seconds:.1f} s "
                f"({self.rows_per_second:,.0f} rows/s){f'; {self.presplits} pre-splits' if self.presplits else ''}")


def import_digest(sources: Sequence[str]) -> str:
    """The digest of a bulk import's request, kept with its import key: its sources as
    given (local paths made absolute)."""
    return digest_of("bulk-import", *((s if "://" in s else os.path.abspath(s)).encode() for s in sources))


def already_imported(state_store: StateStore, table: TableInfo, import_key: Optional[str],
                     sources: Optional[Sequence[str]] = None) -> Optional[BulkImportResult]:
    """The ``already imported`` result when the job of ``import_key`` on ``table`` is
    committed, else None: checked before Spark starts, so a repeated import answers at
    once (the job checks again, since an attempt may commit meanwhile). With
    ``sources``, a key kept for other sources raises IdempotencyKeyReusedError."""
    if import_key is None:
        return None
    if sources is not None:
        earlier = state_store.client_write(table.table_id, import_key)
        if earlier is not None:
            earlier.answer_for(table.name, ClientWrite(import_key, import_digest(sources)))
    job_id = import_job_id(table, import_key)
    stored = state_store.get_job(table.table_id, job_id)
    if stored is None or stored.status != "committed":
        return None
    return BulkImportResult(table.name, import_key, job_id, "already imported")


def import_job_id(table: TableInfo, import_key: str) -> str:
    """The job id of ``import_key`` on ``table`` (the same key always gives the same id)."""
    return "bulk-" + hashlib.sha256(f"{table.table_id}\0{import_key}".encode()).hexdigest()[:32]


def output_key(table_id: str, leaf_id: str, job_id: str, attempt: str) -> str:
    """The file of ``leaf_id`` written by ``attempt`` (``a<n>-<nonce>``) of a bulk import job."""
    return f"{table_id}/data/partition_{leaf_id}/{job_id}-{attempt}.parquet"


def scratch_prefix(table_id: str, job_id: str, attempt: str) -> str:
    """Where an attempt may keep intermediate files (the Spark runner's sorted runs),
    under :func:`~sleeper_ops.maintenance.gc.scratch_root`, named like its outputs. The
    runner removes it when the attempt ends; a later attempt of the job removes its
    predecessors'; the orphan sweep removes what a killed attempt left."""
    return f"{scratch_root(table_id)}/{job_id}-{attempt}"


def _delete_other_scratch(objects: ObjectStore, table_id: str, job_id: str, attempt: str) -> None:
    """Delete the scratch files of the job's other attempts (superseded: they cannot commit)."""
    mine = scratch_prefix(table_id, job_id, attempt) + "/"
    theirs = f"{scratch_root(table_id)}/{job_id}-"
    for o in list(objects.list(scratch_root(table_id))):
        if o.key.startswith(theirs) and not o.key.startswith(mine):
            objects.delete(o.key)


def _delete(objects: ObjectStore, keys: Sequence[str]) -> None:
    for k in keys:
        objects.delete(k)
        objects.delete(sketch_key(k))


def _delete_outputs(objects: ObjectStore, keys: Sequence[str]) -> None:
    """Delete the named output ``keys`` and whatever any task attempt wrote for them
    (one listing per leaf directory): only when nothing can have committed them."""
    _delete(objects, keys)
    for k in attempt_objects(objects, keys):
        objects.delete(k)


def bulk_import(state_store: StateStore, objects: ObjectStore, table: TableInfo, sources: Sequence[str], *,
                run: Runner, import_key: Optional[str] = None, run_id: Optional[str] = None,
                s3: Optional[S3Options] = None, min_leaves: Optional[int] = None,
                ingest_job_id: Optional[str] = None) -> BulkImportResult:
    """Import every file ``sources`` name (see the module docstring). With
    ``ingest_job_id`` (the ingest batcher's job), the commit also marks the ingest
    requests assigned to that job ``ingested``, or is refused if none is any more.

    Raises:
        IngestError: the sources name no readable input (nothing is done).
        SleeperError: the run or the commit failed (the job is recorded failed; see the
            module docstring for what is kept).
    """
    started = time.perf_counter()
    key = import_key or uuid.uuid4().hex
    job_id = import_job_id(table, key)
    result = BulkImportResult(table.name, key, job_id, "failed")
    if already_imported(state_store, table, key, sources) is not None:
        result.status = "already imported"
        return result
    stored = state_store.get_job(table.table_id, job_id)
    if stored is not None and stored.status == "committed":
        result.status = "already imported"
        return result
    expanded = expand_sources(sources, s3)
    files = [path for path, _ in expanded]
    result.files_read = len(files)
    result.presplits = presplit(state_store, objects, table, files, s3=s3, min_leaves=min_leaves,
                                run_id=run_id)
    partitions = tuple(state_store.partitions(table.table_id))
    rec = (stored or JobRecord.created(table.table_id, job_id, "bulk_import", input_files=len(files)))
    attempt = f"a{rec.attempts + 1}-{uuid.uuid4().hex[:8]}"
    keys = {p.id: output_key(table.table_id, p.id, job_id, attempt) for p in partitions if p.is_leaf}
    rec = rec.started(run_id, outputs=sorted(keys.values()))
    state_store.put_job(rec)
    now = state_store.get_job(table.table_id, job_id)
    if now is None or now.status == "committed" or now.outputs != rec.outputs:
        _delete(objects, list(keys.values()))  # nothing written yet; a racing attempt won
        result.status = "already imported" if now is not None and now.status == "committed" else "failed"
        result.reason = None if result.status != "failed" else "another attempt of this import key took over"
        return result
    if stored is not None:  # superseded attempts: their runs go now, their outputs to the sweep
        _delete_other_scratch(objects, table.table_id, job_id, attempt)
    plan = ImportPlan(table, job_id, attempt, tuple(files), partitions, keys, tuple(size for _, size in expanded))
    with Heartbeat(state_store, table, [job_id]):
        return _run_and_commit(state_store, objects, plan, rec, run, result, key=key, ingest_job_id=ingest_job_id,
                               started=started, write=ClientWrite(key, import_digest(sources), answer=job_id))


def _run_and_commit(state_store: StateStore, objects: ObjectStore, plan: ImportPlan, rec: JobRecord, run: Runner,
                    result: BulkImportResult, *, key: str, ingest_job_id: Optional[str],
                    started: float, write: ClientWrite) -> BulkImportResult:
    """Run the import's Spark job and commit its outputs (see :func:`bulk_import`)."""
    table, job_id, keys = plan.table, plan.job_id, plan.output_keys
    # the delete count before Spark reads the sources: a delete committed while the import
    # runs covers its records (statestore.deletes)
    horizon = state_store.tombstones(table.table_id)[0]
    try:
        outputs = list(run(plan))
        missing = [o.key for o in outputs if objects.head(o.key) is None]
        if missing:
            raise IngestError(f"bulk import {key!r}: output files missing before the commit: {', '.join(missing[:5])}")
    except BaseException as e:
        _delete_outputs(objects, list(keys.values()))  # never committed
        _fail(state_store, rec, f"{type(e).__name__}: {e}")
        raise
    records = sum(o.records for o in outputs)
    refs = tuple(FileReference(o.key, o.leaf_id, o.records, delete_horizon=horizon) for o in outputs if o.records)
    done = rec.finished(records, records).committed()
    try:
        applied = state_store.commit(table.table_id, AddFiles(refs), job=done, ingest_job_id=ingest_job_id,
                                     client_write=write)
    except IdempotencyKeyReusedError as e:  # the key is another import's: nothing names these outputs
        _delete_outputs(objects, list(keys.values()))
        _fail(state_store, rec, f"commit refused: {e}")
        raise
    except BookkeepingError as e:
        _delete_outputs(objects, list(keys.values()))
        after = state_store.get_job(table.table_id, job_id)
        if after is not None and after.status == "committed":
            result.status = "already imported"
            return result
        _fail(state_store, rec, f"commit refused: {e}")
        raise
    except (TransactionError, CommitConflictError) as e:
        _delete_outputs(objects, list(keys.values()))
        _fail(state_store, rec, f"commit refused: {e}")
        raise
    except BaseException as e:  # unknown outcome: keep the files for the orphan sweep
        _fail(state_store, rec, f"commit failed: {type(e).__name__}: {e}")
        raise
    if not applied:  # this attempt's own commit (a reply lost), or another attempt's of this key and sources
        after = state_store.get_job(table.table_id, job_id)
        if after is None or after.outputs != done.outputs:
            _delete_outputs(objects, list(keys.values()))  # another attempt committed: nothing names these
            result.status = "already imported"
            return result
    result.status, result.records = "committed", records
    result.files_written = [r.filename for r in refs]
    result.partitions = [r.partition_id for r in refs]
    result.seconds = time.perf_counter() - started
    return result


def _fail(state_store: JobTracker, rec: JobRecord, reason: str) -> None:
    try:
        state_store.put_job(rec.failed(reason))
    except Exception:  # the error being raised is the one to report
        pass
