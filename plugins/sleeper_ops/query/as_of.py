"""As-of reads (issue 22, :mod:`statestore.history`): queries, SQL and the Spark reader
over a table as it was right after an earlier transaction.

:func:`as_of_runner` resolves ``as_of`` (a transaction number, or a time: the state
after the last transaction committed at or before it) against the table's history
retention, refusing in one line of :class:`~statestore.history.HistoryError` a time
before the retention, a number the table never had and a state replaced before the
retention; and gives a :class:`~sleeper_ops.query.runner.QueryRunner` that plans on
that state alone (:class:`FixedMetadata`, never refreshed) with the table's current
iterators.

**The write buffer is excluded.** An as-of read returns only records in files: the
buffer is not versioned (a buffered write becomes part of the table's history when a
flush commits it). :func:`mark_as_of` puts this, with the transaction read, in the
result's schema metadata (:data:`AS_OF_KEY`, :data:`BUFFER_KEY`); the CLI says it on
stderr.

Files an as-of state references are kept by garbage collection for the retention plus
the GC delay (:func:`sleeper_ops.maintenance.gc.keep_unreferenced_ms`), so a read
resolved inside the retention finds them.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import datetime
import threading
from concurrent.futures import Executor
from typing import Any, Callable, Generator, Iterator, Optional, Sequence, TypeVar

import pyarrow as pa

from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.query.metadata import TableMetadata
from sleeper_ops.query.runner import QueryRunner
from statestore import clock
from statestore.catalog import TableInfo
from statestore.changes import TableChanges
from statestore.history import AsOf, AsOfState, parse_as_of, resolve_as_of, resolve_number, retention_ms
from statestore.roles import History
from statestore.state import TableState
from statestore.store import StateStore

T = TypeVar("T")

#: schema metadata of an as-of result: the transaction it read, and that the buffer was not read
AS_OF_KEY = b"sleeper.as_of.transaction"
AS_OF_TIME_KEY = b"sleeper.as_of.time"
BUFFER_KEY = b"sleeper.buffer"
#: what the CLI prints on stderr for every as-of read
BUFFER_NOTE = "as-of reads exclude the write buffer: records not yet flushed at that transaction are not shown"


class FixedMetadata(TableMetadata):
    """A table's metadata as of one state, never refreshed: every plan sees that state."""

    def __init__(self, state_store: StateStore, info: TableInfo, as_of: AsOfState) -> None:
        super().__init__(state_store, info.table_id)
        self.as_of = AsOfState(as_of.number, as_of.time_ms, TableState())  # what it was built from, not kept
        self._apply(TableChanges.whole(info, ("as-of", as_of.number), as_of.state))

    def plan(self, fn: Callable[[TableMetadata], T]) -> T:
        with self._lock:
            return fn(self)

    def guess(self, fn: Callable[[TableMetadata], T]) -> Optional[T]:
        """None: a plan here makes no round trip, so there is nothing to overlap."""
        return None

    def with_table(self, info: TableInfo) -> FixedMetadata:
        """The same state with the catalog entry ``info`` (the table's current properties:
        its iterators apply to as-of reads as they are now); shares the state, read-only."""
        out = copy.copy(self)
        out.table, out._lock = info, threading.Lock()
        return out


def as_of_value(value: Any) -> AsOf:
    """``as_of`` as the API takes it: an int (a transaction number), a datetime (naive:
    UTC), or a string as ``--as-of`` takes it (:func:`statestore.history.parse_as_of`)."""
    if isinstance(value, bool):
        raise TypeError("as_of must be a transaction number, a datetime or a string")
    if isinstance(value, int):
        return value
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    if isinstance(value, str):
        return parse_as_of(value)
    raise TypeError(f"as_of must be a transaction number, a datetime or a string, not {type(value).__name__}")


def resolve(state_store: History, info: TableInfo, as_of: Any, *, now_ms: Optional[int] = None) -> AsOfState:
    """The table's state as of ``as_of`` (see the module docstring for the refusals)."""
    now = clock.now_ms() if now_ms is None else now_ms
    return resolve_as_of(state_store, info.table_id, info.name, as_of_value(as_of), retention=retention_ms(info),
                         now_ms=now)


class AsOfCache:
    """The metadata of the last few as-of states read, by table id and transaction
    number (a state as of a transaction never changes), so repeated as-of reads skip
    rebuilding it. Thread-safe; holds at most ``size`` states."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._items: collections.OrderedDict[tuple[str, int], FixedMetadata] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> Optional[FixedMetadata]:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: tuple[str, int], meta: FixedMetadata) -> None:
        with self._lock:
            self._items[key] = meta
            while len(self._items) > self.size:
                self._items.popitem(last=False)


@contextlib.contextmanager
def as_of_runner(state_store: StateStore, objects: ObjectStore, info: TableInfo, as_of: Any, *,
                 now_ms: Optional[int] = None, threads: int = 4, iterators: Sequence[Any] = (),
                 cache: Optional[AsOfCache] = None, pool: Optional[Executor] = None,
                 python_modules: Sequence[str] = ()) -> Iterator[QueryRunner]:
    """A runner over the table as of ``as_of`` that reads no write buffer, closed on exit;
    its ``as_of`` attribute is the :class:`~statestore.history.AsOfState` read. The
    refusals are checked on every call; the state comes from ``cache`` when it holds it.
    ``pool``: threads to read in, shared and left open (default: ``threads`` of its own).
    ``python_modules``: where the table's Python iterator may come from (default none)."""
    now = clock.now_ms() if now_ms is None else now_ms
    number, when = resolve_number(state_store, info.table_id, info.name, as_of_value(as_of),
                                  retention=retention_ms(info), now_ms=now)
    meta = cache.get((info.table_id, number)) if cache is not None else None
    if meta is None:
        meta = FixedMetadata(state_store, info, AsOfState(number, when, state_store.state_as_of(info.table_id, number)))
        if cache is not None:
            cache.put((info.table_id, number), meta)
    runner = QueryRunner(state_store, objects, info, threads=threads, iterators=iterators,
                         metadata=meta.with_table(info), buffer=False, pool=pool, python_modules=python_modules)
    runner.as_of = meta.as_of
    try:
        yield runner
    finally:
        runner.close()


def as_of_stream(state_store: StateStore, objects: ObjectStore, info: TableInfo, as_of: Any,
                 regions: Sequence[Any], *, limit: Optional[int], batch_rows: int, iterators: Sequence[Any] = (),
                 cache: Optional[AsOfCache] = None, pool: Optional[Executor] = None,
                 python_modules: Sequence[str] = ()) -> Generator[pa.RecordBatch, None, None]:
    """The records of ``regions`` as of ``as_of``, streamed as
    :meth:`QueryRunner.stream` streams them (no write buffer). ``as_of`` is resolved, or
    refused, by this call, before any record is read; the runner is closed when the
    stream ends or is closed."""
    opened = as_of_runner(state_store, objects, info, as_of, iterators=iterators, cache=cache, pool=pool,
                          python_modules=python_modules)
    runner = opened.__enter__()  # resolved (or refused) now

    def batches() -> Generator[pa.RecordBatch, None, None]:
        stream = runner.stream(regions, limit=limit, batch_rows=batch_rows, buffer=False)
        try:
            yield from stream
        finally:
            stream.close()
            opened.__exit__(None, None, None)
    return batches()


def mark_as_of(table: pa.Table, state: AsOfState) -> pa.Table:
    """``table`` with the as-of transaction, its time and ``sleeper.buffer=excluded`` in its
    schema metadata."""
    when = datetime.datetime.fromtimestamp(state.time_ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")
    meta = {**(table.schema.metadata or {}), AS_OF_KEY: str(state.number).encode(), AS_OF_TIME_KEY: when.encode(),
            BUFFER_KEY: b"excluded"}
    return table.replace_schema_metadata(meta)
