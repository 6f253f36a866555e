"""Bulk export: a table (or a key range of it) as one sorted Parquet file per leaf.

:func:`export_table` is what ``sleeper export``, ``Table.export`` and the export DAG
call. It plans every leaf on one state of the table
(:meth:`~sleeper_ops.query.runner.QueryRunner.leaf_plan`: the query path's own plan,
so deletes are hidden, files in ancestor partitions and, by default, the write buffer
are included), reads each leaf through the query path's merge with the table's
iterators applied (:meth:`~sleeper_ops.query.runner.QueryRunner.stream_tasks`), keeps
the rows matching ``where``, and writes one Parquet file per leaf, sorted by key. The
leaves are written in this process (runner ``local``) or one Spark task a leaf (runner
``spark``: :mod:`sleeper_ops.spark.export`, named in :data:`LEAF_WRITERS`).

Guarantees:

* **Exactly the rows of one state.** The union of the files is the answer a query of
  the region would have given when the plan was made, each record in exactly one file;
  the manifest records the transaction number of that state.
* **Idempotent per export key** (:mod:`sleeper_ops.io.export_manifest`): the key is
  kept in the state store with a digest of its request -- destination, region, ``where``
  and whether the buffer is read (:mod:`statestore.client_writes`, recorded before
  anything is written) -- so a key names one export: the same key with another
  destination or selection is refused in one line naming the key, even after its job
  record is gone from the window of keys (then the job record, which names the
  destination's manifest, refuses it). Files are written under their final names
  (``part-00000-<leaf>.parquet``: no attempt id) and the manifest is written last, as
  the commit point. A repeat of a committed key answers "already exported" with its
  manifest and writes nothing; a rerun after a crash writes the whole export afresh,
  commits its manifest, then deletes the part files it does not name, so the
  destination ends with exactly the rows, none twice. A destination holding the export
  of another key is refused in one line.
* **One export per destination at a time**, whatever the table: a lease named by the
  destination alone refuses a concurrent one (:class:`~statestore.errors.LeaseHeldError`),
  so two exports never write, or delete, each other's parts.
* A runner that writes attempt-unique keys (Spark) waits for every attempt to end and
  its winners are moved to the final names before the manifest is written.
* Every export is recorded as a job (kind ``export``) whose ``output`` is its manifest,
  so ``sleeper report erasure`` can find the exports that may hold deleted records.
* Files named by a plan stay readable for the table's GC delay after they lose their
  references; an export that takes longer than that may fail (and can be rerun).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from sleeper_ops.engine.deletes import check_where, matches
from sleeper_ops.engine.key_regions import range_region
from sleeper_ops.errors import ConfigError, QueryError
from sleeper_ops.io.arrow_schema import arrow_schema
from sleeper_ops.io.export_manifest import MANIFEST, ExportedFile, ExportManifest, read_manifest, write_manifest
from sleeper_ops.io.storage import ObjectStore
from statestore import clock
from statestore.client_writes import ClientWrite, IdempotencyKeyReusedError, check_key, digest_of
from statestore.deletes import Tombstone
from statestore.jobs import JobRecord
from statestore.region import Range, Region
from statestore.schema import Schema, min_value

if TYPE_CHECKING:
    from sleeper_ops.query.runner import LeafTasks, QueryRunner
    from statestore.catalog import TableInfo
    from statestore.roles import TableCommits
    from statestore.store import StateStore

RUNNERS = ("local", "spark")
#: Leaf writers that run elsewhere, as ``module:function``, imported when used.
LEAF_WRITERS: dict[str, str] = {"spark": "sleeper_ops.spark.export:write_leaves"}
#: How many times the plan is taken again when a commit lands while it is being taken.
PLAN_ATTEMPTS = 5
#: a part file an export writes: ``part-<index>-<leaf id>.parquet``, or a task attempt's
_PART = re.compile(r"^part-\d{5}-(?P<leaf>.+?)(?:\.attempt-[0-9A-Za-z]+)?\.parquet$")


class ExportError(QueryError):
    """An export was refused (bad input, a destination holding another export) or failed."""


@dataclass(frozen=True)
class LeafJob:
    """One leaf to write: its place in key order, its plan, the key to write it under,
    and the rows' filter (``where``, or None)."""

    index: int
    leaf: LeafTasks
    key: str
    where: Optional[str]


#: Writes the leaves of an export to ``dest``; one ExportedFile per LeafJob, in order.
LeavesWriter = Callable[["QueryRunner", ObjectStore, Sequence[LeafJob]], list[ExportedFile]]


@dataclass(frozen=True)
class ExportResult:
    """An export: its manifest, where it is, and whether this call wrote it (False: a
    repeat of its export key found it already there)."""

    destination: str
    manifest: ExportManifest
    written: bool

    def summary(self) -> str:
        m = self.manifest
        head = "already exported (a repeat of export key" if not self.written else "exported (export key"
        return (f"{head} {m.export_key!r}): {m.rows} records of table {m.table} in {len(m.files)} files "
                f"at transaction {m.transaction}, to {self.destination}")

    def to_dict(self) -> dict[str, Any]:
        return {"destination": self.destination, "written": self.written, "manifest": self.manifest.to_dict()}


def export_region(schema: Schema, lo: Optional[Any] = None, hi: Optional[Any] = None) -> Region:
    """``[lo, hi)`` on the first row key field (``lo`` None: the whole table); an empty
    or inverted range is refused in one line."""
    if lo is None and hi is None:
        return Region(tuple(Range(f.name, min_value(f.type), None)  # type: ignore[arg-type]
                            for f in schema.row_key_fields))
    if lo is None:
        lo = min_value(schema.row_key_fields[0].type)  # type: ignore[arg-type]
    try:
        return range_region(schema, lo, hi)
    except QueryError as e:
        raise ExportError(f"--range: {e}") from None


def check_export(schema: Schema, lo: Optional[Any], hi: Optional[Any], where: Optional[str],
                 export_key: Optional[str]) -> tuple[Region, Optional[str], str]:
    """The region, predicate and export key (a fresh one if None) of an export; bad
    input refused in one line (:class:`ExportError`) before anything is written."""
    region = export_region(schema, lo, hi)
    try:
        where = check_where(schema, where)
        key = check_key(export_key) if export_key is not None else uuid.uuid4().hex
    except Exception as e:
        raise ExportError(str(e)) from None
    return region, where, key


def _no_lease(operation: str) -> ContextManager[Any]:
    return contextlib.nullcontext()


def export_job_id(export_key: str) -> str:
    """The job id recording the export of ``export_key``."""
    return "export-" + hashlib.sha256(export_key.encode()).hexdigest()[:24]


def export_digest(dest_uri: str, region: Region, where: Optional[str], buffer: bool) -> str:
    """The digest of an export's request, kept with its key: destination, region,
    predicate and whether the write buffer is read."""
    return digest_of("export", dest_uri.encode(), json.dumps(region.to_dict(), sort_keys=True, default=repr).encode(),
                     (where or "").encode(), b"1" if where is not None else b"0", b"1" if buffer else b"0")


def destination_lease(dest: ObjectStore) -> str:
    """The name of the lease one export to ``dest`` holds, whatever its table."""
    return "export-destination/" + hashlib.sha256(dest.uri.encode()).hexdigest()[:32]


def _claim(state_store: StateStore, table: TableInfo, dest: ObjectStore, key: str, digest: str) -> None:
    """Keep ``key`` with ``digest`` (or find it kept with it); refuse in one line a key
    kept for another export, by its record or by its job record's destination."""
    manifest_uri = dest.uri_of(MANIFEST)
    rec = state_store.get_job(table.table_id, export_job_id(key))
    other = (rec.outputs[0].removesuffix("/" + MANIFEST)
             if rec is not None and rec.outputs and rec.outputs[0] != manifest_uri else None)
    if other is None:
        try:
            state_store.claim_client_write(table.table_id, ClientWrite(key, digest, answer=dest.uri))
            return
        except IdempotencyKeyReusedError:
            earlier = state_store.client_write(table.table_id, key)
            other = earlier.answer if earlier is not None else "?"
    raise ExportError(f"export key {key!r} of table {table.name} was used for another export (to {other}, or with "
                      "another range or where): a key names one export; choose another --export-key")


def export_table(state_store: StateStore, runner: QueryRunner, table: TableInfo, dest: ObjectStore, *,
                 lo: Optional[Any] = None, hi: Optional[Any] = None, where: Optional[str] = None,
                 export_key: Optional[str] = None, buffer: bool = True, run_id: Optional[str] = None,
                 write_leaves: Optional[LeavesWriter] = None, now_ms: Optional[int] = None,
                 lease: Optional[Callable[[str], ContextManager[Any]]] = None) -> ExportResult:
    """Export ``table``'s records in ``[lo, hi)`` (default all) matching ``where`` to
    ``dest`` (see the module docstring). ``export_key`` defaults to a fresh one.
    ``write_leaves`` writes the leaves (default: in this process, one after another).
    ``lease(name)`` gives the exclusive lease ``name`` (:func:`destination_lease`:
    the destination's, whatever the table), held while exporting."""
    region, where, key = check_export(table.schema, lo, hi, where, export_key)
    with (lease or _no_lease)(destination_lease(dest)):
        held = read_manifest(dest)
        if held is not None and not (held.export_key == key and held.table_id == table.table_id):
            raise ExportError(f"{dest.uri} already holds export {held.export_key!r} of table {held.table}: "
                              "choose another destination (or the same --export-key to confirm it)")
        _claim(state_store, table, dest, key, export_digest(dest.uri, region, where, buffer))
        if held is not None:
            return ExportResult(dest.uri, held, False)
        job_id = export_job_id(key)
        rec = state_store.get_job(table.table_id, job_id) or JobRecord.created(table.table_id, job_id, "export")
        rec = rec.started(run_id, outputs=[dest.uri_of("_manifest.json")])
        state_store.put_job(rec)
        try:
            manifest = _export(state_store, runner, table, dest, region, where, key, buffer,
                               write_leaves or write_leaves_here, now_ms)
        except Exception as e:
            state_store.put_job(rec.failed(f"{type(e).__name__}: {e}"))
            raise
        state_store.put_job(rec.finished(manifest.rows, manifest.rows, dest.uri_of("_manifest.json")).committed())
        _delete_leftovers(dest, manifest, {p.id for p in state_store.partitions(table.table_id)})
        return ExportResult(dest.uri, manifest, True)


def _export(state_store: TableCommits, runner: QueryRunner, table: TableInfo, dest: ObjectStore, region: Region,
            where: Optional[str], key: str, buffer: bool, write_leaves: LeavesWriter,
            now_ms: Optional[int]) -> ExportManifest:
    """Plan on one state, write every leaf under attempt-unique names, commit the manifest."""
    # The plan is exactly at ``at`` when no commit changed partitions or references while
    # it was taken (the number read before and after agree); under a stream of commits
    # that never lets them agree, the last plan is recorded with the number read after it
    # (the plan is at most that state, and at least the one read before).
    for _ in range(PLAN_ATTEMPTS):
        before = state_store.transaction_number(table.table_id)
        plan = runner.leaf_plan(region, buffer=buffer)
        at = state_store.transaction_number(table.table_id)
        if at == before:
            break
    jobs = [LeafJob(i, leaf, f"part-{i:05d}-{leaf.leaf_id}.parquet", where) for i, leaf in enumerate(plan.leaves)]
    files = []
    for job, f in zip(jobs, write_leaves(runner, dest, jobs)):
        if f.key != job.key:  # an attempt's own key (Spark): every attempt has ended; the winner takes the name
            dest.move(f.key, job.key)
        files.append(ExportedFile(f.leaf, job.key, f.rows))
    manifest = ExportManifest(table.name, table.table_id, key, at,
                              clock.now_ms() if now_ms is None else now_ms, region.to_dict(), where,
                              buffer, runner.iterators.describe(), tuple(files))
    write_manifest(dest, manifest)
    return manifest


def write_leaf(runner: QueryRunner, dest: ObjectStore, job: LeafJob) -> ExportedFile:
    """Write one leaf's records (the query path's merge, iterators applied, ``where``
    kept) as one sorted Parquet file under ``job.key``."""
    target = arrow_schema(runner.schema)
    probe = None if job.where is None else Tombstone(0, (job.leaf.region,), job.where)
    rows = 0
    with dest.open_output(job.key) as sink:
        writer: Optional[pq.ParquetWriter] = None
        try:
            for batch in runner.stream_tasks(job.leaf):
                if probe is not None:
                    batch = batch.filter(matches(batch, probe))
                if not batch.num_rows:
                    continue
                if writer is None:
                    writer = _writer(sink, batch.schema, runner.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
            if writer is None:
                writer = _writer(sink, target, runner.schema)
                writer.write_table(pa.Table.from_batches([], schema=target))
        finally:
            if writer is not None:
                writer.close()
    return ExportedFile(job.leaf.leaf_id, job.key, rows)


def _writer(sink: Any, schema: pa.Schema, table_schema: Schema) -> pq.ParquetWriter:
    names = table_schema.key_names
    return pq.ParquetWriter(sink, schema, compression="zstd", write_statistics=True,
                            sorting_columns=[pq.SortingColumn(schema.get_field_index(n)) for n in names
                                             if n in schema.names])


def write_leaves_here(runner: QueryRunner, dest: ObjectStore, jobs: Sequence[LeafJob]) -> list[ExportedFile]:
    """Runner ``local``: every leaf in this process, one after another."""
    return [write_leaf(runner, dest, j) for j in jobs]


def load_leaves_writer(runner: str, **options: Any) -> Optional[LeavesWriter]:
    """The leaves writer of export runner ``runner`` (None: ``local``), made by the
    factory :data:`LEAF_WRITERS` names with ``options``."""
    if runner == "local":
        return None
    if runner not in LEAF_WRITERS:
        raise ExportError(f"unknown export runner {runner!r}; expected one of {', '.join(RUNNERS)}")
    module_name, factory = LEAF_WRITERS[runner].split(":")
    try:
        module: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"the {runner} export runner needs its packages installed: {e}") from e
    made: LeavesWriter = getattr(module, factory)(**options)
    return made


def _delete_leftovers(dest: ObjectStore, manifest: ExportManifest, partition_ids: set[str]) -> None:
    """Delete the part files earlier or losing attempts left in ``dest``: named as an
    export of this table names them (``part-<index>-<partition id>``, with or without an
    attempt tag) and not in the committed manifest. The destination holds this export
    only, under its lease; files of any other name (another tool's ``part-...`` files)
    are left alone."""
    kept = {f.key for f in manifest.files}
    for o in list(dest.list("")):
        m = _PART.match(o.key) if "/" not in o.key else None
        if o.key not in kept and m is not None and m["leaf"] in partition_ids:
            dest.delete(o.key)


def rows_of(dest: ObjectStore, manifest: ExportManifest) -> pa.Table:
    """Every row an export holds (its manifest's files, in order): for tests and checks."""
    tables = []
    for f in manifest.files:
        with dest.open_input(f.key) as src:
            tables.append(pq.read_table(src))
    return pa.concat_tables(tables) if tables else pa.table({})
