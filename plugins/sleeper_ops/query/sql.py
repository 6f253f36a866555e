"""SQL over every table of an instance, through DataFusion.

:class:`SqlEngine` runs one read-only statement (``SELECT``, ``WITH``, ``EXPLAIN``,
``SHOW TABLES``...; DDL, DML and ``SET`` are refused) in which any table of the
catalog can be named. Guarantees:

- **A SQL answer equals a query answer.** Each table's rows come from the table's
  :class:`~sleeper_ops.query.runner.QueryRunner` (its ``stream``): partition-restricted
  references, duplicates across files merged in key order, and the table's iterators
  (age-off, aggregation, user iterators) applied, before any SQL operator sees them.
- **Key predicates prune.** The predicates on a table's first row key field become key
  regions (:mod:`sleeper_ops.query.sql_keys`); the runner reads only the leaves
  overlapping them plus their ancestors, and from each file only the rows of its
  reference's partition. When a table is scanned once and its filters are all such
  predicates, the regions hold exactly the rows they accept, and the scan does not
  filter them again (a pyarrow filter costs about 0.8 ms a batch). ``EXPLAIN`` adds,
  per table, the regions, the leaves chosen and the files chosen out of the total.
- **Memory is bounded by the operators, not the tables:** rows are streamed batch by
  batch from the runner into DataFusion.
- **Names as written.** Table and column names are case-sensitive, as the catalog and
  schemas hold them: DataFusion's identifier normalization is off, so ``FROM Events``
  reads table ``Events`` (never ``events``) and ``SELECT Count`` field ``Count``; a name
  that matches nothing is named as written in the error.
- **Errors:** bad SQL, unknown tables and columns raise :class:`SqlError` with a one-line
  message; errors of the state store or of reading files keep their own type.

Design choice. datafusion 55's Python API has no pure-Python table provider (custom
providers are Rust through FFI), and ``register_record_batches``, ``from_arrow`` and
pyarrow's ``InMemoryDataset`` all materialise their input. Its pyarrow-dataset provider,
though, checks only ``isinstance(pyarrow.dataset.Dataset)`` and then calls
``schema``, ``scanner(columns, filter)``, ``get_fragments(filter)`` and, per fragment at
execution, ``scanner(...).to_batches()``; it reports every filter it can translate to
pyarrow as pushed down *exactly*. So each table is a :class:`SleeperDataset` (a
``Dataset`` subclass implementing just those calls) whose one fragment streams the
runner's batches and applies the pushed filter and projection itself; a Python
``SchemaProvider`` resolves table names lazily from the catalog. Key regions come from the
optimized logical plan (each ``TableScan``'s pushed filters) before execution; a table
scanned more often than the plan walk saw (e.g. inside a subquery the bindings do not
expose) is read whole, so pruning can only be missed, never wrong.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, ContextManager, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from sleeper_ops.errors import SqlError
from sleeper_ops.io.arrow_schema import arrow_schema
from sleeper_ops.io.pandas_free import load_datafusion, load_pyarrow_dataset
from sleeper_ops.query.runner import QueryRunner
from sleeper_ops.query.sql_explain import ScanReport, explain_rows, scan_report
from sleeper_ops.query.sql_keys import Interval, everything, key_intervals_exact, regions_of, union
from statestore.catalog import TableInfo
from statestore.errors import SleeperError, TableNotFoundError
from statestore.region import Region
from statestore.store import StateStore

load_datafusion()  # first imports of DataFusion and pyarrow.dataset, without pandas (sleeper_ops.io.pandas_free)
load_pyarrow_dataset()

import pyarrow.dataset as ds  # noqa: E402
from datafusion import SessionConfig, SessionContext, SQLOptions  # noqa: E402
from datafusion.catalog import SchemaProvider, Table  # noqa: E402

#: Opens a table's runner for the statement's duration (a shared runner: ``nullcontext``).
RunnerOpener = Callable[[TableInfo], ContextManager[QueryRunner]]


class _Scan:
    """The part of a pyarrow ``Scanner`` DataFusion uses: the projected schema and the
    batches, filtered by ``filter`` (exactly) and then projected to ``columns``."""

    def __init__(self, schema: pa.Schema, batches: Callable[[], Iterator[pa.RecordBatch]],
                 columns: Optional[Sequence[str]], filter: Any):
        if filter is not None and not isinstance(filter, pc.Expression):  # a literal, e.g. false
            filter = pc.scalar(filter.as_py() if isinstance(filter, pa.Scalar) else filter)
        self._schema, self._batches, self._filter = schema, batches, filter
        self._columns = None if columns is None else list(columns)
        self.projected_schema = schema if columns is None else pa.schema([schema.field(c) for c in columns])

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        # Batch by batch, pulled only as DataFusion asks (a pyarrow Scanner over the stream
        # would read the whole stream ahead).
        for b in self._batches():
            if self._filter is not None:
                b = b.filter(self._filter)
            if self._columns is not None:
                b = b.select(self._columns)
            if b.num_rows:
                yield b


class _Fragment:
    def __init__(self, dataset: SleeperDataset):
        self._dataset = dataset

    def scanner(self, schema: Any = None, columns: Optional[Sequence[str]] = None, filter: Any = None,
                **_: Any) -> _Scan:
        # a filter the regions read already hold exactly is not applied a second time
        return _Scan(self._dataset.schema, self._dataset.read, columns,
                     None if self._dataset.filter_held_by_regions() else filter)


class SleeperDataset(ds.Dataset):
    """One Sleeper table as DataFusion's pyarrow-dataset provider sees it.

    ``intervals`` (set from the plan before execution; None until then) bounds what a
    scan reads on the first row key field; see the module docstring for why a
    subclass and which calls it answers.
    """

    def __init__(self, engine: SqlEngine, info: TableInfo):  # no super().__init__: nothing of the base is used
        self.engine, self.info = engine, info
        self._schema = arrow_schema(info.schema)
        self.intervals: Optional[list[Interval]] = None
        #: whether the filters of the plan's last scan of this table are ones ``intervals`` hold exactly
        self.intervals_exact = False
        self.scans_seen = 0  # TableScans of this table found in the optimized logical plan
        self.scans_planned = 0  # scans DataFusion's physical plan made of it

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def scanner(self, columns: Optional[Sequence[str]] = None, filter: Any = None, **_: Any) -> _Scan:
        return _Scan(self._schema, lambda: iter(()), columns, filter)

    def get_fragments(self, filter: Any = None) -> list[_Fragment]:
        with self.engine.lock:
            self.scans_planned += 1
        return [_Fragment(self)]

    def intervals_to_read(self) -> list[Interval]:
        """What a scan reads of the first row key field: the plan's intervals, or the
        whole key space when they are unknown or DataFusion scans more often than the
        plan walk saw."""
        if self.intervals is None or self.scans_planned > self.scans_seen:
            return everything(self.info.schema)
        return self.intervals

    def filter_held_by_regions(self) -> bool:
        """Whether the rows of :meth:`regions` are exactly those the scan's pushed filter
        accepts: the plan scans this table once, DataFusion planned that one scan, and
        its filters are all predicates on the first row key field that the intervals
        hold exactly (:func:`~sleeper_ops.query.sql_keys.key_intervals_exact`)."""
        return (self.intervals is not None and self.intervals_exact and self.scans_seen == 1
                and self.scans_planned == 1)

    def regions(self) -> list[Region]:
        """:meth:`intervals_to_read` as query regions."""
        return regions_of(self.info.schema, self.intervals_to_read())

    def read(self) -> Iterator[pa.RecordBatch]:
        """The table's records in the scan's regions, after the table's iterators."""
        try:
            runner = self.engine.runner(self.info)
            regions = self.regions()
            if regions:
                yield from runner.stream(regions)
        except Exception as e:
            self.engine.failed(e)
            raise


class _Tables(SchemaProvider):
    """A DataFusion ``SchemaProvider`` over the catalog: tables are looked up by name
    when a statement names them, each once per statement."""

    def __init__(self, engine: SqlEngine):
        self.engine = engine

    # DataFusion's binding reads ``owner_name`` and ``table_names`` as attributes.
    @property
    def owner_name(self) -> Optional[str]:  # type: ignore[override]
        return None

    @property
    def table_names(self) -> list[str]:  # type: ignore[override]
        try:
            return [t.name for t in self.engine.state_store.list_tables()]
        except Exception as e:
            self.engine.failed(e)
            raise

    def table(self, name: str) -> Any:
        try:
            return Table(self.engine.dataset(name))
        except TableNotFoundError:
            self.engine.missing.append(name)
            return None
        except Exception as e:
            self.engine.failed(e)
            raise

    def table_exist(self, name: str) -> bool:
        return self.table(name) is not None

    def register_table(self, name: str, table: Any) -> None:
        raise SqlError("tables are created with 'sleeper table create', not in SQL")

    def deregister_table(self, name: str, cascade: bool) -> None:
        raise SqlError("tables are deleted with 'sleeper table delete', not in SQL")


class SqlEngine:
    """Runs one SQL statement over the tables of ``state_store``; see the module docstring.

    ``open_runner`` gives the runner of a table (entered once per table and statement,
    exited when the statement is done).
    """

    def __init__(self, state_store: StateStore, open_runner: RunnerOpener):
        self.state_store, self.open_runner = state_store, open_runner
        self.lock = threading.Lock()
        self.datasets: dict[str, SleeperDataset] = {}
        self.missing: list[str] = []
        self.errors: list[BaseException] = []
        self._runners: dict[str, QueryRunner] = {}
        self._stack = contextlib.ExitStack()

    # ----- callbacks from DataFusion ------------------------------------------------------
    def dataset(self, name: str) -> SleeperDataset:
        with self.lock:
            if name not in self.datasets:
                self.datasets[name] = SleeperDataset(self, self.state_store.get_table(name))
            return self.datasets[name]

    def runner(self, info: TableInfo) -> QueryRunner:
        with self.lock:
            if info.name not in self._runners:
                self._runners[info.name] = self._stack.enter_context(self.open_runner(info))
            return self._runners[info.name]

    def failed(self, error: BaseException) -> None:
        with self.lock:
            self.errors.append(error)

    # ----- running ------------------------------------------------------------------------
    def execute(self, text: str) -> pa.Table:
        """The statement's result; ``EXPLAIN`` adds a ``sleeper_scan`` row per table."""
        with self._stack:
            df = self._call(lambda: self._plan(text))
            plan = self._call(df.optimized_logical_plan)
            explain = type(plan.to_variant()).__name__ in ("Explain", "Analyze")
            self._set_intervals(plan)
            result: pa.Table = self._call(df.to_arrow_table)
            if explain:
                result = explain_rows(result, self.reports())
            return result

    def reports(self) -> list[ScanReport]:
        """What each table's scan reads, as :func:`scan_report` describes it."""
        return [scan_report(self.state_store, self.runner(d.info), d.info, d.intervals_to_read())
                for _, d in sorted(self.datasets.items()) if d.scans_planned]

    def _plan(self, text: str) -> Any:
        ctx = SessionContext(SessionConfig().with_information_schema(True)
                             .set("datafusion.sql_parser.enable_ident_normalization", "false"))
        ctx.catalog("datafusion").register_schema("public", _Tables(self))
        options = SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)
        return ctx.sql_with_options(text, options)

    def _set_intervals(self, plan: Any) -> None:
        """Each scanned table's key intervals: the union over its scans in ``plan``."""
        for name, filters in _table_scans(plan):
            d = self.datasets.get(name) or self.datasets.get(name.removeprefix("datafusion.").removeprefix("public."))
            if d is None:  # a name the walk cannot match to a table: that table is read whole
                continue
            d.scans_seen += 1
            found, exact = key_intervals_exact(d.info.schema, filters)
            d.intervals_exact = exact  # read only with one scan of the table (filter_held_by_regions)
            d.intervals = found if d.intervals is None else union(d.intervals, found)

    def _call(self, fn: Callable[[], Any]) -> Any:
        """``fn()``, with DataFusion's errors translated: an error our callbacks raised is
        re-raised as itself; an unknown table or bad SQL becomes a :class:`SqlError`."""
        try:
            return fn()
        except SleeperError:
            raise
        except Exception as e:
            if self.errors:
                raise self.errors[0] from e
            message = _one_line(str(e)).removeprefix("SQL error: ")
            if self.missing and "not found" in message:
                known = sorted(t.name for t in self.state_store.list_tables())
                raise SqlError(f"no table named {self.missing[0]!r} (tables: {', '.join(known) or 'none'})") from e
            raise SqlError(f"SQL: {message}") from e


def _table_scans(plan: Any) -> Iterator[tuple[str, list[Any]]]:
    """(table name, pushed filters) of every ``TableScan`` in ``plan`` and its inputs."""
    stack = [plan]
    while stack:
        node = stack.pop()
        scan = node.to_variant()
        if type(scan).__name__ == "TableScan":
            yield str(scan.table_name()), list(scan.filters())
        stack.extend(node.inputs())


def _one_line(message: str) -> str:
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())
