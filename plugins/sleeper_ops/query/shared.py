"""One query runner per table, shared by every query of a :class:`~sleeper_ops.Sleeper`.

:class:`SharedRunners` keeps, per table id, a :class:`~sleeper_ops.query.runner.QueryRunner`
with its metadata copy (:class:`~sleeper_ops.query.metadata.TableMetadata`) and its
thread pool, made on the table's first query and reused by every later one, from any
thread: ``Table.query``, ``Table.query_batches``, the CLI and the REST app all go
through it. A query with extra iterators gets a light runner of its own that shares the
table's metadata and pool (nothing to close).

The runner re-reads the catalog entry with every metadata refresh (the same round
trip), so property changes (iterators) apply to the next query. A table that is
deleted or renamed keeps nothing stale: the runner is keyed by the table's id (a
rename changes only the name it reports), and :meth:`SharedRunners.forget` (called
when a table is deleted through the Sleeper, or a query finds it gone) closes its
pool and drops its metadata. :meth:`SharedRunners.close` closes them all.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.query.as_of import AsOfCache
from sleeper_ops.query.metadata import TableMetadata
from sleeper_ops.query.runner import QueryRunner
from statestore.catalog import TableInfo
from statestore.store import StateStore


class SharedRunners:
    """The per-table runners of one Sleeper (see the module docstring). Thread-safe."""

    def __init__(self, state_store: StateStore, objects: ObjectStore, *, threads: int = 4,
                 python_modules: Sequence[str] = ()) -> None:
        """``python_modules``: the deployment's ``iterators.python_modules`` (where tables'
        Python iterators may come from), given to every runner."""
        self.state_store, self.objects, self.threads = state_store, objects, threads
        self.python_modules = tuple(python_modules)
        self._runners: dict[str, QueryRunner] = {}
        self._lock = threading.Lock()
        #: the last few as-of states read (:mod:`sleeper_ops.query.as_of`)
        self.as_of_states = AsOfCache()
        self._closed = False

    def runner(self, table: TableInfo, iterators: Sequence[Any] = ()) -> QueryRunner:
        """The table's shared runner; with ``iterators``, a runner sharing its metadata
        and pool that also applies them. Never close what this returns."""
        with self._lock:
            shared = self._runners.get(table.table_id)
            if shared is None:
                if self._closed:
                    raise RuntimeError("the Sleeper is closed")
                shared = self._runners[table.table_id] = QueryRunner(
                    self.state_store, self.objects, table, threads=self.threads, python_modules=self.python_modules)
        if not iterators:
            return shared
        return QueryRunner(self.state_store, self.objects, shared.table, threads=self.threads, iterators=iterators,
                           metadata=shared.metadata, pool=shared._pool, python_modules=self.python_modules)

    def metadata(self, table: TableInfo) -> TableMetadata:
        """The table's shared metadata copy (for runners made elsewhere)."""
        return self.runner(table).metadata

    def forget(self, table_id: str) -> None:
        """Close the table's runner and drop its metadata (the next query starts afresh)."""
        with self._lock:
            runner = self._runners.pop(table_id, None)
        if runner is not None:
            runner.close()

    def close(self) -> None:
        """Close every runner; later queries are refused."""
        with self._lock:
            self._closed = True
            runners, self._runners = list(self._runners.values()), {}
        for r in runners:
            r.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._runners)

    def __contains__(self, table_id: object) -> bool:
        with self._lock:
            return table_id in self._runners

