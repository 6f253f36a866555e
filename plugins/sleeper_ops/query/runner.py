"""Queries: exact keys, ranges and many of each, merged in key order.

For each queried region the runner reads the leaf partitions that overlap it and
their ancestors (whose references cover data not yet pushed down), and from each
referenced file only the rows inside both the reference's partition and the
region. Row groups whose statistics miss the range are skipped; the Parquet
footers are cached (files never change). Sub-queries run in parallel threads and
the results are merged into key order. The table's iterators (age-off, user
iterators, aggregation; see :mod:`sleeper_ops.engine.iterators`) then run over the merged
result, so aggregation sees the records of every file of a key together.

:meth:`QueryRunner.query` returns the whole result as one Arrow table (the fastest
for small results). :meth:`QueryRunner.stream` yields it batch by batch, in the same
order, with the iterators applied as it goes and an optional ``limit`` pushed down:
memory holds the batches not yet consumed plus a bounded read-ahead (one batch per
open file; see :mod:`sleeper_ops.query.stream`), not the result, and reading stops
once ``limit`` rows are out.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Generator, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from sleeper_ops.engine import kernels
from sleeper_ops.engine.deletes import without_deleted
from sleeper_ops.engine.iterators import BatchFn, IteratorChain
from sleeper_ops.engine.key_regions import exact_key_region, range_region  # noqa: F401 - re-exported
from sleeper_ops.engine.leaves import region_mask, sorted_slice
from sleeper_ops.errors import TableRenamedError
from sleeper_ops.io.arrow_schema import arrow_schema, empty_table, sort_keys
from sleeper_ops.io.datafile import FILE_CACHE, ParquetFileCache
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.query.buffered import BufferedRows
from sleeper_ops.query.metadata import TableMetadata
from sleeper_ops.query.row_groups import Located, locate, row_groups
from sleeper_ops.query.stream import PendingSource, limited, merge_sources
from sleeper_ops.query.tasks import (
    LeafPlan,
    LeafTasks,
    Task,
    Tasks,
    disjoint_regions,
    intersect,
    reads_of,
    region_tasks,
    tasks_on,
)
from statestore.catalog import TableInfo
from statestore.files import FileReference
from statestore.history import AsOfState
from statestore.region import Region
from statestore.store import StateStore

#: Rows per batch that :meth:`QueryRunner.stream` reads from a file and yields.
DEFAULT_BATCH_ROWS = 32_768


class QueryRunner:
    """Runs queries against one table; safe to reuse across queries and threads.

    Every query plans on the table's metadata brought up to date when it starts
    (:class:`~sleeper_ops.query.metadata.TableMetadata`: incremental, read-your-writes).
    Once the runner holds a copy of it, :meth:`query` reads the files the copy names
    while the copy is brought up to date, and keeps those reads only if the up-to-date
    plan reads the same (docs/adr/0014-query-overlaps-freshness-check.md).
    The table's iterator properties, then ``iterators`` (extra user iterators, run
    after the table's own), apply to every result; they are checked here and again
    whenever the table's properties change (a bad property raises
    :class:`~sleeper_ops.errors.ConfigError`). Age-off measures age from the time each
    query runs.
    """

    def __init__(self, state_store: StateStore, objects: ObjectStore, table: TableInfo, *,
                 threads: int = 4, cache: Optional[ParquetFileCache] = None,
                 iterators: Sequence[BatchFn] = (), metadata: Optional[TableMetadata] = None,
                 pool: Optional[Executor] = None, buffer: bool = True, python_modules: Sequence[str] = ()):
        """``metadata``: the table's metadata copy to plan with, shared with other
        runners of the table (default: one of this runner's own). ``pool``: threads to
        read in, shared with other runners and not shut down by :meth:`close` (default:
        ``threads`` threads of this runner's own). ``buffer=False``: never read the
        write buffer, whatever a query asks (an as-of runner, :mod:`sleeper_ops.query.as_of`).
        ``python_modules``: where the table's Python iterator may come from (the
        deployment's ``iterators.python_modules``; default none)."""
        self._extra_iterators = tuple(iterators)
        self.python_modules = tuple(python_modules)
        self.iterators = IteratorChain.for_table(table, iterators, python_modules=self.python_modules)
        self.state_store, self.objects, self.table = state_store, objects, table
        self.schema = table.schema
        self._first_type = str(self.schema.row_key_fields[0].type)  # a row key is of a primitive type
        self.target = arrow_schema(self.schema)
        self.threads = threads
        self.cache = cache or FILE_CACHE or ParquetFileCache()
        self._owns_pool = pool is None
        self._pool: Executor = pool if pool is not None else ThreadPoolExecutor(threads)
        self.metadata = metadata if metadata is not None else TableMetadata(state_store, table.table_id)
        self.buffered = BufferedRows(state_store, table.table_id, self.schema)
        self.reads_buffer = buffer
        #: the transaction an as-of runner reads (:class:`statestore.history.AsOfState`: its number
        #: and time; the state itself is in ``metadata``), else None
        self.as_of: Optional[AsOfState] = None

    def _current_plan(self, meta: TableMetadata) -> None:
        """Take the catalog entry ``meta`` was refreshed with: a change of the table's
        properties (e.g. its iterators) applies from this query on."""
        table = meta.table
        if table is not None and table is not self.table:
            if table.properties != self.table.properties:
                self.iterators = IteratorChain.for_table(table, self._extra_iterators,
                                                         python_modules=self.python_modules)
            self.table = table

    def close(self) -> None:
        """Shut down this runner's own thread pool (not a shared one)."""
        if self._owns_pool:
            self._pool.shutdown(wait=False)

    def _tasks(self, regions: Sequence[Region], named: Optional[str] = None) -> Tasks:
        """One task per file reference and (disjoint) query region it may hold rows of,
        planned on the table's metadata brought up to date now (read-your-writes), each
        with the tombstones that hide rows of it; with the table's live tombstones then.
        With ``named``, TableRenamedError unless that catalog entry has that name."""
        disjoint = disjoint_regions(regions)

        def plan(meta: TableMetadata) -> Tasks:
            self._current_plan(meta)
            if named is not None and self.table.name != named:
                raise TableRenamedError(f"table {named!r} not found: it is now named {self.table.name!r}")
            return tasks_on(meta, disjoint)

        return self.metadata.plan(plan)

    def _guess(self, regions: Sequence[Region]) -> Optional[list[Task]]:
        """The tasks of ``regions`` on the metadata copy as it stands, without asking the
        state store (:meth:`TableMetadata.guess`); None when there is none to make, or
        it failed (the plan then decides alone)."""
        if self.threads < 2:
            return None
        disjoint = disjoint_regions(regions)
        try:
            return self.metadata.guess(lambda meta: list(tasks_on(meta, disjoint)))
        except Exception:  # a guess never fails a query: the up-to-date plan raises what is wrong
            return None

    def leaf_plan(self, region: Region, *, buffer: bool = True) -> LeafPlan:
        """Every leaf partition overlapping ``region``, each with the tasks that read
        its part of ``region`` (its own files and its ancestors', deletes applied) and,
        with ``buffer``, the write buffer's records in it: all planned on ONE state of
        the table (one metadata read, no flush between it and the buffer read), so
        the leaves' rows together are exactly what :meth:`query` of ``region`` would
        return at that moment, each record in one leaf. :meth:`stream_tasks` reads a
        leaf's tasks. Bulk export (:mod:`sleeper_ops.query.export`) plans with this."""

        def plan(meta: TableMetadata) -> LeafPlan:
            self._current_plan(meta)
            live = tuple(meta.tombstones[n] for n in sorted(meta.tombstones))
            leaves = []
            for part in meta.overlapping(region):
                inter = intersect(region, part.region) if part.is_leaf else None
                if inter is not None:
                    leaves.append(LeafTasks(part.id, inter, tuple(region_tasks(meta, inter, (), live))))
            leaves.sort(key=lambda leaf: tuple(r.min for r in leaf.region.ranges))
            return LeafPlan(tuple(leaves), live)

        if not buffer:
            return self.metadata.plan(plan)
        if self.buffered.flushes is None:
            self.buffered.read()
        while True:
            before = self.buffered.flushes
            planned = self.metadata.plan(plan)
            rows, flushes = self.buffered.read(planned.tombstones)
            if before == flushes:
                return LeafPlan(tuple(replace(leaf, buffered=self._buffered_in(rows, leaf.region))
                                      for leaf in planned.leaves), planned.tombstones)

    def _buffered_in(self, rows: Any, region: Region) -> Optional[pa.Table]:
        table = self.buffered.in_regions(rows, [region])
        if not table.num_rows:
            return None
        return table.cast(self.target) if table.schema != self.target else table

    def stream_tasks(self, leaf: LeafTasks, *, batch_rows: int = DEFAULT_BATCH_ROWS
                     ) -> Generator[pa.RecordBatch, None, None]:
        """The records of one leaf of a :meth:`leaf_plan`, in key order, after the
        table's iterators, as :meth:`stream` yields them (the same merge)."""
        pending = [PendingSource(t.region.ranges[0].min, i, _opener(self, t, batch_rows))
                   for i, t in enumerate(leaf.tasks)]
        if leaf.buffered is not None:
            batches = leaf.buffered.to_batches(max_chunksize=batch_rows)
            pending.append(PendingSource(leaf.region.ranges[0].min, len(pending), lambda: iter(batches)))
        merged = merge_sources(pending, self.schema.key_names, sort_keys(self.schema), self._pool,
                               max_rows=batch_rows, start_ahead=max(1, self.threads // 2))
        if not self.iterators.is_empty:
            merged = self.iterators.apply(merged)
        return limited(merged, None)

    def _plan(self, regions: Sequence[Region], buffer: bool,
              named: Optional[str] = None) -> tuple[list[Task], Optional[pa.Table]]:
        """The tasks of ``regions`` (``named``: see :meth:`_tasks`) and, with ``buffer``,
        the write buffer's records in them, consistent with each other: no flush committed
        between the two reads (see :mod:`sleeper_ops.query.buffered`)."""
        if not buffer or not self.reads_buffer:
            return self._tasks(regions, named), None
        if self.buffered.flushes is None:
            self.buffered.read()  # the first query: learn the flush count before planning
        while True:
            before = self.buffered.flushes
            tasks = self._tasks(regions, named)
            rows = self.buffered.current(tasks.buffer_mark, tasks.tombstones)  # read with the plan: consistent
            if rows is None:
                rows, flushes = self.buffered.read(tasks.tombstones)
                if before != flushes:
                    continue
            table = self.buffered.in_regions(rows, regions)
            return tasks, table.cast(self.target) if table.schema != self.target else table

    def query(self, regions: Sequence[Region], *, buffer: bool = True) -> pa.Table:
        """Every record in any of ``regions``, once, in key order; with ``buffer``
        (the default), the records still in the write buffer too."""
        guess = self._guess(regions)
        if guess is None:
            tasks, buffered = self._plan(regions, buffer)
            parts = self._read_all(tasks)
        else:
            parts, buffered = self._read_guessed(guess, regions, buffer)
        if buffered is not None:
            parts.append(buffered)
        parts = [p for p in parts if p.num_rows]
        if not parts:
            return empty_table(self.target)
        result = pa.concat_tables(parts)
        if len(parts) > 1:
            result = kernels.sorted_by(result, sort_keys(self.schema))
        if not self.iterators.is_empty:
            result = self.iterators.apply_table(result)
        return result

    def _read_all(self, tasks: Sequence[Task], located: Optional[list[Located]] = None) -> list[pa.Table]:
        """The rows of each task that has row groups to read (:meth:`_locate`), read in
        the pool's threads (in this one when one task has)."""
        if located is None:
            located = self._locate(tasks)
        if located is None:
            if len(tasks) == 1:
                return [self._read(tasks[0])]
            return list(self._pool.map(self._read, tasks))
        if len(located) == 1:
            return [self._read_at(*located[0])]
        return list(self._pool.map(lambda at: self._read_at(*at), located))

    def _locate(self, tasks: Sequence[Task]) -> Optional[list[Located]]:
        """:func:`~sleeper_ops.query.row_groups.locate` of ``tasks`` with this runner's cache."""
        return locate(self.cache, self.objects, self._first_type, tasks)

    def _read_guessed(self, guess: list[Task], regions: Sequence[Region], buffer: bool
                      ) -> tuple[list[pa.Table], Optional[pa.Table]]:
        """The parts and buffered rows :meth:`query` reads, with the state store's round
        trip overlapped: the files of ``guess`` (tasks planned on the metadata copy as it
        stood) are read here while a pool thread plans on the copy brought up to date
        (:meth:`_plan`). The guess's reads are kept only when the plan's tasks read exactly
        the same (file, region, exclusions, tombstones); otherwise the plan's are read.
        So the answer is the one :meth:`query` gives without a guess: a read depends on
        nothing else, and data files never change. A read of the guess that failed (say,
        a file of a stale plan already collected) is raised only if the plan reads it too.

        A one-file guess submits the plan only once its file is open, just before the
        decoding: the decoding releases the GIL, so the plan's Python runs beside it
        instead of against the read's own Python (exact-key p50 0.36-0.44 ms to
        0.32-0.34, p95 0.49-0.61 to 0.36-0.40, on 2 cores; ADR 0014)."""
        planned: list[Future[tuple[list[Task], Optional[pa.Table]]]] = []

        def plan() -> None:  # once
            if not planned:
                planned.append(self._pool.submit(self._plan, regions, buffer))

        failure: Optional[Exception] = None
        try:
            located = self._locate(guess)
            if located is not None and len(located) <= 1:
                parts = [self._read_at(*located[0], before_decode=plan)] if located else []
            elif len(guess) == 1:
                parts = [self._read(guess[0], before_decode=plan)]
            else:
                plan()
                parts = self._read_all(guess, located)
        except Exception as e:
            parts, failure = [], e
        plan()
        tasks, buffered = planned[0].result()
        if [reads_of(t) for t in tasks] != [reads_of(t) for t in guess]:
            return self._read_all(tasks), buffered
        if failure is not None:
            raise failure
        return parts, buffered

    def stream(self, regions: Sequence[Region], *, limit: Optional[int] = None, batch_rows: int = DEFAULT_BATCH_ROWS,
               buffer: bool = True, named: Optional[str] = None) -> Generator[pa.RecordBatch, None, None]:
        """The records of :meth:`query`, in the same order (records with equal keys in
        any order), as non-empty record batches of at most ``batch_rows`` rows (user
        iterators may return bigger ones), after the table's iterators; at most ``limit``
        records (None: all).

        The table's partitions and references are read when this is called; files are
        read as the generator is consumed, each a batch at a time and at most one batch
        ahead of the merge, opened only once the merge reaches their region. Reading
        stops as soon as ``limit`` records have been yielded; closing the generator early
        stops it too. Errors of the state store are raised here, those of reading files
        while iterating; with ``named``, TableRenamedError when the table's catalog entry
        the plan read has another name.
        """
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be at least 1, got {batch_rows}")
        tasks, buffered = self._plan(regions, buffer, named)
        pending = [PendingSource(t.region.ranges[0].min, i, _opener(self, t, batch_rows))
                   for i, t in enumerate(tasks)]
        if buffered is not None and buffered.num_rows:
            batches = buffered.to_batches(max_chunksize=batch_rows)
            pending.append(PendingSource(min(r.ranges[0].min for r in regions), len(pending),
                                         lambda: iter(batches)))
        merged = merge_sources(pending, self.schema.key_names, sort_keys(self.schema), self._pool,
                               max_rows=batch_rows, start_ahead=max(1, self.threads // 2))
        if not self.iterators.is_empty:
            merged = self.iterators.apply(merged)
        return limited(merged, limit)

    def planned_references(self, regions: Sequence[Region]) -> list[FileReference]:
        """The file references a query of ``regions`` would read (each once), from the
        partitions and references that query would use now; reads no file."""
        chosen: dict[tuple[str, str], FileReference] = {}
        for t in self._tasks(regions):
            chosen.setdefault((t.ref.filename, t.ref.partition_id), t.ref)
        return list(chosen.values())

    def _row_groups(self, task: Task) -> tuple[pq.FileMetaData, list[int]]:
        """:func:`~sleeper_ops.query.row_groups.row_groups` of ``task`` with this runner's cache."""
        return row_groups(self.cache, self.objects, self._first_type, task)

    def _select(self, table: Any, task: Task) -> Any:
        """The rows of ``table`` (a Table or RecordBatch read from a data file, so sorted on
        the first row key field) in the task's region and none of its excluded regions,
        with the table's Arrow types. The first field's range is one slice (no copy); a
        region on more fields, or with exclusions, is then filtered."""
        table = sorted_slice(table, task.region.ranges[0])
        if len(task.region.ranges) > 1 or task.exclude:
            mask = region_mask(table, task.region)
            for other in task.exclude:
                mask = kernels.and_(mask, kernels.invert(region_mask(table, other)))
            table = kernels.filter_rows(table, mask)
        table = without_deleted(table, task.deletes)
        if table.schema != self.target:
            table = table.cast(self.target)
        return table

    def _read(self, task: Task, before_decode: Optional[Callable[[], None]] = None) -> pa.Table:
        """The task's rows (:meth:`_select`) from the row groups that may hold them, read
        whole; ``before_decode`` is called once the file is open, before its decoding (or
        when no row group needs reading)."""
        return self._read_at(task, *self._row_groups(task), before_decode=before_decode)

    def _read_at(self, task: Task, md: pq.FileMetaData, groups: list[int],
                 before_decode: Optional[Callable[[], None]] = None) -> pa.Table:
        """:meth:`_read` of the row groups ``groups`` of the file of footer ``md``."""
        if not groups:
            if before_decode is not None:
                before_decode()
            return empty_table(self.target)
        # pre-buffered from a remote store: the groups' column chunks in one coalesced ranged GET, not one each
        with self.cache.reader(self.objects, task.ref.filename) as f:
            pf = pq.ParquetFile(f, metadata=md, pre_buffer=not self.objects.is_local)
            if before_decode is not None:
                before_decode()
            table = pf.read_row_groups(groups, use_threads=False)
        return self._select(table, task)

    def _read_batches(self, task: Task, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """The task's rows, in key order, ``batch_rows`` rows of the file at a time;
        stops at the first row past the region on the first row key field."""
        md, groups = self._row_groups(task)
        if not groups:
            return
        first = task.region.ranges[0]
        # From a remote store, pre-buffered: Arrow coalesces the groups' column chunks into ranged GETs
        # of at most 32 MiB, each fetched when the scan first needs it (lazily), so memory stays
        # bounded; one GET per column chunk (4 per 2,048 rows here) made S3 scans crawl.
        with self.cache.reader(self.objects, task.ref.filename) as f:
            pf = pq.ParquetFile(f, metadata=md, pre_buffer=not self.objects.is_local)
            for raw in pf.iter_batches(batch_size=batch_rows, row_groups=groups, use_threads=False):
                if not raw.num_rows:
                    continue
                past = first.max is not None and raw.column(first.field)[-1].as_py() >= first.max
                b = self._select(raw, task)
                if b.num_rows:
                    yield b
                if past:  # the file is sorted on the first row key field: nothing further is inside
                    return



def _opener(runner: QueryRunner, task: Task, batch_rows: int) -> Any:
    return lambda: runner._read_batches(task, batch_rows)
