"""The Python API: ``Sleeper(home=...)`` and its tables.

    from sleeper_ops import Sleeper
    with Sleeper(home=".sleeper") as s:
        t = s.create_table("events", schema, split_points=["m"])
        t.ingest(["events.parquet"])
        t.query(keys=["abc"])            # a pyarrow.Table in key order
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import pyarrow as pa

from sleeper_ops.bulk_import.dated import with_import_start
from sleeper_ops.bulk_import.templates import check_templates
from sleeper_ops.config import SleeperConfig
from sleeper_ops.engine.iterators import ITERATOR_PROPERTIES, check_iterator_properties
from sleeper_ops.io.storage import ObjectStore, S3Options
from sleeper_ops.query.shared import SharedRunners
from sleeper_ops.table import Table
from statestore.backends import open_state_store
from statestore.catalog import TableInfo, check_table_name
from statestore.partitions import partitions_from_split_points
from statestore.properties import BULK_IMPORT_SOURCE, validate_properties, validate_values
from statestore.schema import Schema
from statestore.store import StateStore

if TYPE_CHECKING:
    from sleeper_ops.compaction.runners import BatchRunner
    from sleeper_ops.ingest.batcher import JobRunners


class Sleeper:
    """Entry point: a state store and an object store named by ``SLEEPER_HOME``.

    ``config`` replaces ``home/sleeper.toml`` (e.g. a configuration built from an Airflow
    connection); ``state_store`` and ``objects`` may be given directly (tests,
    embedding), and so may ``python_iterator_modules`` (where tables' Python iterators
    may come from; by default the configuration's ``iterators.python_modules``, none
    without a configuration). Otherwise both come from the configuration: the state store through
    the backend registry (:mod:`statestore.backends`), which starts the embedded
    PostgreSQL when no DSN is configured. Use as a context manager, or call :meth:`close`.

    Queries share one runner per table (:attr:`queries`, see
    :mod:`sleeper_ops.query.shared`): its copy of the table's metadata is brought up to
    date incrementally before each query, so repeated queries cost what they read.
    """

    def __init__(self, home: Optional[os.PathLike[str] | str] = None, *, config: Optional[SleeperConfig] = None,
                 state_store: Optional[StateStore] = None, objects: Optional[ObjectStore] = None,
                 python_iterator_modules: Optional[Sequence[str]] = None):
        if config is None and (state_store is None or objects is None):
            config = SleeperConfig.load(home)
        self.config: Optional[SleeperConfig] = config
        if objects is None:
            assert config is not None
            objects = ObjectStore(config.object_store_uri, config.s3)
        if state_store is None:
            assert config is not None
            state_store = open_state_store(config.state_store_backend, **config.state_store_options())
        self.state_store = state_store
        self.objects = objects
        #: where tables' Python iterators may come from: ``python_iterator_modules`` if
        #: given, else the configuration's ``iterators.python_modules`` (none without one;
        #: :mod:`sleeper_ops.engine.user_iterators`)
        self.python_iterator_modules: tuple[str, ...] = (
            tuple(python_iterator_modules) if python_iterator_modules is not None
            else config.python_iterator_modules if config is not None else ())
        self.queries = SharedRunners(state_store, objects, python_modules=self.python_iterator_modules)

    @property
    def s3(self) -> Optional[S3Options]:
        """The S3 options of the configuration, else of the object store given."""
        return self.config.s3 if self.config else self.objects.s3

    def spark_batch_runner(self, run_id: Optional[str] = None) -> Optional[BatchRunner]:
        """A function running a batch of compaction jobs with spark-submit, or None
        when this instance was not opened from a configuration."""
        if self.config is None:
            return None
        from sleeper_ops.compaction.runners import load_batch_runner

        return load_batch_runner("spark")(self.config, self.state_store, run_id)

    def close(self) -> None:
        """Close the query runners and the state store (and stop an embedded server it started)."""
        self.queries.close()
        self.state_store.close()

    def __enter__(self) -> Sleeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- catalog --------------------------------------------------------------------
    def create_table(self, name: str, schema: Schema | Mapping[str, Any] | str, split_points: Sequence[Any] = (),
                     properties: Optional[Mapping[str, str]] = None) -> Table[Sleeper]:
        """Create a table whose leaf partitions divide the first row key at ``split_points``.
        A name that cannot become Airflow DAG ids and tags raises
        :class:`~statestore.errors.TableNameError` (see :data:`statestore.catalog.TABLE_NAME_RULE`)."""
        check_table_name(name)
        if isinstance(schema, str):
            schema = Schema.from_json(schema)
        elif not isinstance(schema, Schema):
            schema = Schema.from_dict(schema)
        props = validate_properties(with_import_start({}, properties or {}))
        check_iterator_properties(schema, props, self.python_iterator_modules, table=name)
        check_templates(name, props)
        partitions = partitions_from_split_points(schema, split_points or ())
        info = self.state_store.create_table(name, schema, partitions, props)
        return Table(self, info)

    def tables(self) -> list[TableInfo]:
        return self.state_store.list_tables()

    def table(self, name: str) -> Table[Sleeper]:
        return Table(self, self.state_store.get_table(name))

    def batcher_runners(self, table_name: str) -> JobRunners:
        """What the ingest batcher runs table ``table_name``'s jobs with
        (:meth:`Table.batcher_runners`)."""
        return self.table(table_name).batcher_runners()

    def set_properties(self, name: str, properties: Mapping[str, str]) -> TableInfo:
        """Set properties of table ``name``, keeping the others; an empty value clears a
        property. Every name and value is checked before anything changes, iterators
        against the table's schema (their user code imported), the dated DAGs' templates
        rendered on a sample interval (:mod:`sleeper_ops.bulk_import.templates`), so a
        table never holds a property its queries, maintenance or DAG runs would fail on."""
        update = validate_values(properties)
        check_templates(name, update)
        if any(update.get(k) for k in ITERATOR_PROPERTIES) or update.get(BULK_IMPORT_SOURCE):
            current = self.state_store.get_table(name)
            check_iterator_properties(current.schema, update, self.python_iterator_modules, table=name)
            update = with_import_start(current.properties, update)
        return self.state_store.update_properties(name, update)

    def unset_properties(self, name: str, names: Sequence[str]) -> TableInfo:
        """Clear properties of table ``name`` (each takes its default again)."""
        return self.set_properties(name, dict.fromkeys(names, ""))

    def rename_table(self, old: str, new: str) -> TableInfo:
        """Rename table ``old`` (whatever its name) to ``new``, which must follow the table name rule."""
        check_table_name(new)
        return self.state_store.rename_table(old, new)

    def delete_table(self, name: str) -> TableInfo:
        """Remove the table from the catalog, then delete its objects."""
        info = self.state_store.delete_table(name)
        self.queries.forget(info.table_id)
        for obj in list(self.objects.list(info.table_id)):
            self.objects.delete(obj.key)
        return info

    def sql(self, text: str, *, as_of: Any = None) -> pa.Table:
        """The result of one read-only SQL statement over this instance's tables (each
        named by its table name), through DataFusion. Every table reads as its queries
        do (its iterators applied; with ``as_of``, as :meth:`Table.query` with
        ``as_of``: every table as of then, the write buffer excluded); predicates on a
        table's first row key field prune the partitions and files read; ``EXPLAIN`` shows what each table's scan reads.
        Bad SQL and unknown tables raise :class:`~sleeper_ops.errors.SqlError`. Tables
        are read through their shared runners (:attr:`queries`). See
        :mod:`sleeper_ops.query.sql`."""
        import contextlib

        from sleeper_ops.query.sql import SqlEngine

        if as_of is not None:  # every table as of then, buffer excluded (sleeper_ops.query.as_of)
            from sleeper_ops.query.as_of import as_of_runner

            return SqlEngine(self.state_store, lambda info: as_of_runner(
                self.state_store, self.objects, info, as_of, cache=self.queries.as_of_states,
                python_modules=self.python_iterator_modules)).execute(text)
        return SqlEngine(self.state_store, lambda info: contextlib.nullcontext(self.queries.runner(info))).execute(text)
