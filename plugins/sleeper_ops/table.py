"""A table of a :class:`~sleeper_ops.api.Sleeper` (``Sleeper.table(name)``): ingest,
write, query (now or as of an earlier transaction), delete, export, and the maintenance
operations, each refusing in one line that names the table by its name."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generator, Generic, Iterable, Optional, Sequence, TypeVar

import pyarrow as pa

from sleeper_ops.errors import QueryError, TableRenamedError
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.query.runner import DEFAULT_BATCH_ROWS, QueryRunner, exact_key_region, range_region
from sleeper_ops.table_host import TableHost
from statestore.catalog import TableInfo
from statestore.errors import SleeperError, TableNotFoundError
from statestore.jobs import JobRecord
from statestore.region import Region
from statestore.schema import Schema
from statestore.state import TableState

if TYPE_CHECKING:
    from sleeper_ops.bulk_import.job import BulkImportResult
    from sleeper_ops.compaction.runners import CompactionReport
    from sleeper_ops.ingest.batcher import JobRunners
    from sleeper_ops.ingest.buffer import WriteResult
    from sleeper_ops.ingest.flush import FlushResult
    from sleeper_ops.ingest.standard import IngestResult, Progress
    from sleeper_ops.maintenance.deletes import DeleteResult
    from sleeper_ops.maintenance.erasure import ErasureReport
    from sleeper_ops.maintenance.gc import GCReport
    from sleeper_ops.maintenance.leases import OperationLease
    from sleeper_ops.maintenance.splitting import SplitReport
    from sleeper_ops.query.export import ExportResult
    from statestore.buffer import BufferStats
    from statestore.history import TransactionSummary
    from statestore.ingest_requests import IngestRequest


_F = TypeVar("_F", bound=Callable[..., Any])
#: the Sleeper a table belongs to: ``Sleeper.table`` gives a ``Table[Sleeper]``
H = TypeVar("H", bound=TableHost)


def _by_name(method: _F) -> _F:
    """A :class:`Table` method whose errors name the table by its name: the state store
    knows tables by id, so its refusals say ``table <id>``; this rewrites them to
    ``table '<name>'``, keeping the error's type (and the original as its cause)."""
    @functools.wraps(method)
    def named(self: Table[Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except SleeperError as e:
            tid, text = self.info.table_id, str(e)
            if f"table {tid}" not in text:
                raise
            try:
                renamed = type(e)(text.replace(f"table {tid}", f"table {self.info.name!r}"))
            except Exception:
                raise e from None
            raise renamed from e
    return named  # type: ignore[return-value]


@dataclass
class Table(Generic[H]):
    """One table of a :class:`~sleeper_ops.api.Sleeper` (``sleeper``). ``info`` is the
    catalog entry when it was opened."""

    sleeper: H
    info: TableInfo

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def schema(self) -> Schema:
        return self.info.schema

    def state(self) -> TableState:
        return self.sleeper.state_store.load_state(self.info.table_id)

    @_by_name
    def ingest(self, source: Sequence[str] | pa.Table | Iterable[pa.RecordBatch], *,
               progress: Optional[Progress] = None, request_id: Optional[str] = None, **options: Any) -> IngestResult:
        """Ingest files (paths or s3:// URIs), an Arrow table, or conformed record batches.
        ``request_id`` is an idempotency key kept with a digest of the files' names and
        sizes (or the Arrow table's content): sent again with the same input (an Airflow
        retry after an unknown outcome), nothing is added and the first ingest's answer
        comes back (``repeat``); with other input it is refused. See
        :mod:`sleeper_ops.ingest.standard`."""
        from sleeper_ops.ingest.standard import IngestRunner

        runner = IngestRunner(self.sleeper.state_store, self.sleeper.objects, self.info, s3=self.sleeper.s3,
                              request_id=request_id, **options)
        if isinstance(source, pa.Table):
            return runner.ingest_table(source, progress)
        if isinstance(source, (list, tuple)) and all(isinstance(s, str) for s in source):
            return runner.ingest_files(list(source), progress)
        return runner.ingest_batches(source, progress)

    @_by_name
    def bulk_import(self, sources: Sequence[str], *, import_key: Optional[str] = None, run_id: Optional[str] = None,
                    runner: str = "spark", **options: Any) -> BulkImportResult:
        """Import every file ``sources`` name (files, directories or globs, local or
        ``s3://``) with a Spark job, in one commit; imports of the same ``import_key``
        add their records once. Returns a
        :class:`~sleeper_ops.bulk_import.job.BulkImportResult`; see
        :mod:`sleeper_ops.bulk_import.job` for the guarantees. Needs a Sleeper opened
        from a configuration (its ``[spark] master`` or ``service``). Local paths are made
        absolute here, against this process's working directory, before the runner (which
        may run elsewhere: the Spark service) sees them."""
        from sleeper_ops.bulk_import.runners import load_bulk_import_runner
        from sleeper_ops.bulk_import.sources import absolute_sources, expand_sources
        from sleeper_ops.errors import ConfigError

        if self.sleeper.config is None:
            raise ConfigError("bulk import needs a Sleeper opened from a configuration (home or config)")
        sources = absolute_sources(sources)
        done = self.already_imported(import_key, sources)
        if done is not None:  # answered before Spark starts
            return done
        expand_sources(list(sources), self.sleeper.s3)  # a bad source fails here, before Spark starts
        submit = load_bulk_import_runner(runner)
        return submit(self.sleeper.config, self._fresh(), list(sources), import_key=import_key, run_id=run_id,
                      **options)

    def batcher_runners(self) -> JobRunners:
        """What the ingest batcher (:mod:`sleeper_ops.ingest.batcher`) runs this table's
        jobs with: :meth:`ingest` as the batcher's job, and :meth:`bulk_import` keyed by
        the job's id (none without a configuration)."""
        from sleeper_ops.ingest.batcher import JobRunners

        def ingest(files: list[str], job: JobRecord) -> tuple[int, int]:
            result = self.ingest(files, job=job, ingest_job_id=job.job_id)
            return result.records, len(result.files)

        def bulk_import(files: list[str], job: JobRecord, run_id: Optional[str]) -> tuple[int, int]:
            result = self.bulk_import(files, import_key=job.job_id, run_id=run_id, ingest_job_id=job.job_id)
            return result.records, len(result.files_written)

        return JobRunners(self.info, ingest, bulk_import if self.sleeper.config is not None else None)

    def already_imported(self, import_key: Optional[str],
                         sources: Optional[Sequence[str]] = None) -> Optional[BulkImportResult]:
        """The ``already imported`` :class:`~sleeper_ops.bulk_import.job.BulkImportResult`
        when a bulk import of ``import_key`` into this table has committed, else None;
        with ``sources``, IdempotencyKeyReusedError when the key was kept for others."""
        from sleeper_ops.bulk_import.job import already_imported

        return already_imported(self.sleeper.state_store, self.info, import_key,
                                None if sources is None else list(sources))

    def query_runner(self, threads: int = 4, iterators: Sequence[Any] = ()) -> QueryRunner:
        """A reusable runner with the table's current properties (iterators included),
        with a thread pool of its own (close it) and the table's shared metadata copy."""
        info = self._fresh()
        return QueryRunner(self.sleeper.state_store, self.sleeper.objects, info, threads=threads,
                           iterators=iterators, metadata=self.sleeper.queries.metadata(info),
                           python_modules=self.sleeper.python_iterator_modules)

    def _shared_runner(self, iterators: Sequence[Any]) -> QueryRunner:
        return self.sleeper.queries.runner(self.info, iterators)

    def _regions(self, keys: Sequence[Any], ranges: Sequence[tuple[Any, Optional[Any]]],
                 regions: Sequence[Region]) -> list[Region]:
        rs = list(regions)
        for k in keys:
            rs.append(exact_key_region(self.schema, list(k) if isinstance(k, (tuple, list)) else [k]))
        for lo, hi in ranges:
            rs.append(range_region(self.schema, lo, hi))
        if not rs:
            raise QueryError("give at least one key or range")
        return rs

    @_by_name
    def query(self, *, keys: Sequence[Any] = (), ranges: Sequence[tuple[Any, Optional[Any]]] = (),
              regions: Sequence[Region] = (), iterators: Sequence[Any] = (), buffer: bool = True,
              as_of: Any = None) -> pa.Table:
        """Records with any of ``keys`` (a value, or a tuple of row key values) or in any
        ``[min, max)`` of ``ranges`` on the first row key (``max=None``: unbounded), after
        the table's iterators and then ``iterators`` (callables on Arrow record batches).
        With ``buffer`` (the default) records still in the write buffer are included:
        a query sees every write that returned before it.

        ``as_of`` (a transaction number of :meth:`history`, a datetime, or an ISO 8601
        string) reads the table as it was right after that transaction, files only: the
        write buffer is excluded, and the result's schema metadata says so
        (``sleeper.buffer: excluded``) with the transaction read
        (:mod:`sleeper_ops.query.as_of`). Refused with
        :class:`~statestore.history.HistoryError` for a time before the table's
        ``sleeper.table.history.retention.minutes`` or a transaction it never had."""
        rs = self._regions(keys, ranges, regions)
        if as_of is not None:
            from sleeper_ops.query.as_of import as_of_runner, mark_as_of

            queries = self.sleeper.queries
            with as_of_runner(self.sleeper.state_store, self.sleeper.objects, self._fresh(), as_of,
                              iterators=iterators, cache=queries.as_of_states, pool=queries.runner(self.info)._pool,
                              python_modules=self.sleeper.python_iterator_modules) as runner:
                assert runner.as_of is not None
                return mark_as_of(runner.query(rs, buffer=False), runner.as_of)
        try:
            return self._shared_runner(iterators).query(rs, buffer=buffer)
        except TableNotFoundError:
            self.sleeper.queries.forget(self.info.table_id)
            raise

    def query_batches(self, *, keys: Sequence[Any] = (), ranges: Sequence[tuple[Any, Optional[Any]]] = (),
                      regions: Sequence[Region] = (), iterators: Sequence[Any] = (), limit: Optional[int] = None,
                      batch_rows: int = DEFAULT_BATCH_ROWS, buffer: bool = True, as_of: Any = None,
                      by_name: bool = False) -> Generator[pa.RecordBatch, None, None]:
        """The records of :meth:`query`, in the same order, streamed as record batches,
        at most ``limit`` of them (None: all); see :meth:`QueryRunner.stream`. Memory holds
        a few batches, not the result; reading stops once ``limit`` records are out.
        ``as_of`` reads as :meth:`query` does (files only, whatever ``buffer``).
        ``by_name``: read the table that has this Table's name now, or raise
        TableRenamedError when this Table's has another by then (the caller, which kept
        this Table for the name, looks the name up again).

        Bad keys or ranges, an as-of refusal and state store errors are raised by this
        call, before any record is read; errors reading files are raised while iterating.
        Closing the iterator early stops reading."""
        rs = self._regions(keys, ranges, regions)
        if as_of is not None:
            from sleeper_ops.query.as_of import as_of_stream

            queries = self.sleeper.queries
            return as_of_stream(self.sleeper.state_store, self.sleeper.objects, self._fresh(), as_of, rs,
                                limit=limit, batch_rows=batch_rows, iterators=iterators, cache=queries.as_of_states,
                                pool=queries.runner(self.info)._pool,
                                python_modules=self.sleeper.python_iterator_modules)
        try:
            return self._shared_runner(iterators).stream(rs, limit=limit, batch_rows=batch_rows, buffer=buffer,
                                                         named=self.info.name if by_name else None)
        except TableRenamedError:
            raise  # the table is still there, its runner still of use
        except TableNotFoundError:
            self.sleeper.queries.forget(self.info.table_id)
            raise

    @_by_name
    def history(self, limit: int = 20, *, upto: Optional[int] = None) -> list[TransactionSummary]:
        """The table's transactions, newest first (at most ``limit``, numbered at most
        ``upto``): :class:`~statestore.history.TransactionSummary` s."""
        return self.sleeper.state_store.history(self.info.table_id, limit=limit, upto=upto)

    # ----- deletes (sleeper_ops.maintenance.deletes) ------------------------------------
    @_by_name
    def delete(self, *, keys: Sequence[Any] = (), ranges: Sequence[tuple[Any, Optional[Any]]] = (),
               where: Optional[str] = None, request_id: Optional[str] = None) -> DeleteResult:
        """Delete the records with any of ``keys`` or in any ``[min, max)`` of ``ranges``
        (and, with ``where``, matching that SQL predicate on any fields) written before
        this call, in one commit: every read hides them from now on and compaction purges
        them. ``request_id`` is an idempotency key. Returns a
        :class:`~sleeper_ops.maintenance.deletes.DeleteResult`; bad input raises
        :class:`~sleeper_ops.engine.deletes.DeleteInputError` and deletes nothing."""
        from sleeper_ops.maintenance.deletes import delete_records

        return delete_records(self.sleeper.state_store, self._fresh(), keys=keys, ranges=ranges, where=where,
                              request_id=request_id)

    @_by_name
    def erasure_report(self, *, keys: Sequence[Any] = (), ranges: Sequence[tuple[Any, Optional[Any]]] = (),
                       where: Optional[str] = None, now_ms: Optional[int] = None) -> ErasureReport:
        """Every place still holding a record (or the keys) matching the keys or ranges
        (and ``where``), each with when it goes as judged at ``now_ms`` (default now):
        a :class:`~sleeper_ops.maintenance.erasure.ErasureReport`, clean once none does."""
        from sleeper_ops.maintenance.erasure import erasure_report

        return erasure_report(self.sleeper.state_store, self.sleeper.objects, self._fresh(), keys=keys,
                              ranges=ranges, where=where, now_ms=now_ms)

    @_by_name
    def export(self, destination: str, *, range: Optional[tuple[Any, Optional[Any]]] = None,
               where: Optional[str] = None, export_key: Optional[str] = None, runner: str = "local",
               buffer: bool = True, run_id: Optional[str] = None) -> ExportResult:
        """Export the records (in ``range`` ``[lo, hi)``, matching ``where``) to
        ``destination`` (a directory or ``s3://`` prefix) as one sorted Parquet file per
        leaf and a ``_manifest.json``; idempotent per ``export_key``. Returns an
        :class:`~sleeper_ops.query.export.ExportResult`; see :mod:`sleeper_ops.query.export`."""
        from sleeper_ops.query.export import check_export, export_table, load_leaves_writer

        info = self._fresh()
        lo, hi = range if range is not None else (None, None)
        check_export(info.schema, lo, hi, where, export_key)  # before the destination is made
        options = {} if runner == "local" else {"config": self.sleeper.config, "table": info.name}
        writer = load_leaves_writer(runner, **options)
        from sleeper_ops.maintenance.leases import OperationLease

        holder = run_id or f"export-{os.getpid()}-{id(self)}"
        store = self.sleeper.state_store
        return export_table(store, self._shared_runner(()), info,
                            ObjectStore(destination, self.sleeper.s3), lo=lo, hi=hi, where=where,
                            export_key=export_key, buffer=buffer, run_id=run_id, write_leaves=writer,
                            lease=lambda name: OperationLease(store, name, holder))

    # ----- maintenance ----------------------------------------------------------------
    def _fresh(self) -> TableInfo:
        """The catalog entry as it is now (properties may have changed since opening)."""
        return self.sleeper.state_store.get_table(self.info.name)

    def exclusive(self, operation: str, holder: str, *,
                  holder_gone: Optional[Callable[[str], bool]] = None) -> OperationLease:
        """The table's lease for ``operation`` (``compaction``, ``split``, ``gc``, ...) as a
        context manager, the same one the Airflow DAGs take: raises LeaseHeldError if
        another run holds it (unless ``holder_gone`` says that holder is gone for good:
        then it is taken over); renewed while held, released on exit."""
        from sleeper_ops.maintenance.leases import OperationLease, lease_name

        return OperationLease(self.sleeper.state_store, lease_name(self.info.table_id, operation), holder,
                              holder_gone=holder_gone)

    @_by_name
    def compact(self, runner: Optional[str] = None, *, iterators: Sequence[Any] = (), run_id: Optional[str] = None,
                max_workers: Optional[int] = None, retry_after_minutes: Optional[float] = None,
                progress: Optional[Progress] = None, on_jobs: Any = None) -> CompactionReport:
        """Create compaction jobs and run them with ``runner`` (default: the table's
        ``sleeper.table.compaction.runner``); each job commits atomically. Skipped
        when the table is offline. See :mod:`sleeper_ops.compaction.runners`."""
        from sleeper_ops.compaction.runners import compact_table

        return compact_table(self.sleeper.state_store, self.sleeper.objects, self._fresh(), runner=runner,
                             iterators=iterators, run_id=run_id, max_workers=max_workers,
                             retry_after_minutes=retry_after_minutes, progress=progress, on_jobs=on_jobs,
                             spark=self.sleeper.spark_batch_runner(run_id),
                             python_modules=self.sleeper.python_iterator_modules)

    @_by_name
    def split(self, *, run_id: Optional[str] = None) -> SplitReport:
        """Split leaf partitions over the table's threshold at their median; returns a
        :class:`~sleeper_ops.maintenance.splitting.SplitReport`. Skipped when the table is offline."""
        from sleeper_ops.maintenance.splitting import split_partitions

        return split_partitions(self.sleeper.state_store, self.sleeper.objects, self._fresh(), run_id=run_id)

    @_by_name
    def gc(self, *, dry_run: bool = False, orphans: bool = True, now_ms: Optional[int] = None,
           explain: bool = False) -> GCReport:
        """Delete unreferenced files older than the GC delay, and orphaned objects older
        than the grace period; ``dry_run`` only lists them. Returns a
        :class:`~sleeper_ops.maintenance.gc.GCReport`, which (``explain``: one more read
        of the whole state, for a person asking) also counts the files still waiting and
        says when the first becomes due. Skipped when the
        table is offline. ``now_ms`` judges the ages as at that time (e.g. the demo's
        "once the delay has passed"); default now."""
        from sleeper_ops.maintenance.gc import collect_garbage

        return collect_garbage(self.sleeper.state_store, self.sleeper.objects, self._fresh(), dry_run=dry_run,
                               orphans=orphans, now_ms=now_ms, explain=explain)

    def jobs(self, kind: Optional[str] = None, limit: int = 1000) -> list[JobRecord]:
        """The table's job status records, newest first."""
        return self.sleeper.state_store.list_jobs(self.info.table_id, kind=kind, limit=limit)

    # ----- write buffer ---------------------------------------------------------------
    @_by_name
    def write(self, records: Any, *, request_id: Optional[str] = None) -> WriteResult:
        """Store ``records`` (a list of dicts, an Arrow table or record batch) in the
        table's write buffer; returns a :class:`~sleeper_ops.ingest.buffer.WriteResult`
        whose ``seq`` is the write's sequence number, once the records are durable.
        Records that do not fit the schema raise IngestError and nothing is stored; a
        full buffer raises :class:`~statestore.errors.BufferFullError`. ``request_id``
        is an idempotency key: sent again with the same records (e.g. after a timeout),
        the write stores nothing and returns the first write's ``seq``. See
        :mod:`sleeper_ops.ingest.buffer`."""
        from sleeper_ops.ingest.buffer import write_records

        return write_records(self.sleeper.state_store, self._fresh(), records, request_id=request_id)

    @_by_name
    def write_files(self, paths: Sequence[str], *, request_id: Optional[str] = None) -> WriteResult:
        """Store every record of the files (JSON Lines, CSV, Parquet) as one write, all
        or nothing; see :meth:`write`."""
        from sleeper_ops.ingest.buffer import read_files, write_records

        records = read_files(paths, self.schema, self.sleeper.s3, table=self.name)
        return write_records(self.sleeper.state_store, self._fresh(), records, request_id=request_id)

    @_by_name
    def ingest_request(self, files: Sequence[str], *, request_id: Optional[str] = None) -> list[IngestRequest]:
        """Queue ``files`` (local paths or ``s3://`` URIs) for the table's ingest
        batcher, all or nothing; returns the queued
        :class:`~statestore.ingest_requests.IngestRequest` s. ``request_id`` is an
        idempotency key: sent again with the same files, nothing more is queued and the
        first call's requests are returned."""
        from sleeper_ops.ingest.batcher import submit_ingest_requests

        return submit_ingest_requests(self.sleeper, self.name, list(files), request_id=request_id)

    @_by_name
    def flush(self, *, run_id: Optional[str] = None) -> FlushResult:
        """Write the buffered records as sorted files, one per leaf, removing them from
        the buffer in the same commit, exactly once; returns a
        :class:`~sleeper_ops.ingest.flush.FlushResult`. See :mod:`sleeper_ops.ingest.flush`."""
        from sleeper_ops.ingest.flush import flush_buffer

        return flush_buffer(self.sleeper.state_store, self.sleeper.objects, self._fresh(), run_id=run_id,
                            s3=self.sleeper.s3)

    def buffer_stats(self) -> BufferStats:
        """Entries, records and oldest write time of the write buffer
        (:class:`~statestore.buffer.BufferStats`)."""
        return self.sleeper.state_store.buffer_stats(self.info.table_id)
