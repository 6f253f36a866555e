"""A Spark 4 Python data source reading Sleeper tables: ``spark.read.format("sleeper")``.

    from sleeper_ops.spark.datasource import register
    register(spark)                      # once per SparkSession
    df = (spark.read.format("sleeper").option("table", "events")
          .option("home", "/srv/sleeper")  # or .option("config_file", ...); default $SLEEPER_HOME
          .load())
    df.where("key >= 'a' AND key < 'b'").count()

Options: ``table`` (required), and where the instance is: ``home`` (a ``SLEEPER_HOME``
holding ``sleeper.toml``) or ``config_file`` (a file as written for spark-submit, see
:func:`sleeper_ops.spark.batch_files.write_config_file`); neither: ``$SLEEPER_HOME`` of
the process planning the read. The configuration is read once, when the scan is planned,
and travels with the scan to the executors, so they need neither the file nor the
variable; it travels in clear, state store DSN and S3 keys included, like the
configuration file of a spark-submit batch.

Guarantees:

* **A DataFrame row is a query answer.** Each input partition reads through the table's
  own query path (:meth:`sleeper_ops.table.Table.query_batches`): references restricted
  to their partitions (files in ancestor partitions included), duplicates across files
  merged in key order, the table's iterators applied. Data files are read by pyarrow, so
  a table on S3 needs no Hadoop jars.
* **One input partition per leaf** that overlaps the pushed key filters and has a
  reference in it or in an ancestor when the scan is planned -- or every leaf that
  overlaps them when the table's write buffer holds records then, since buffered
  records may fall in leaves with no file at all. Each reads the key range
  of its leaf (intersected with the filters), and those ranges are disjoint and cover the
  key space, so every record committed before planning is read exactly once, even if
  partitions split or compact meanwhile. Records committed during the scan may or may
  not appear; each input partition sees the table as of when it starts reading.
* **Key filters are pushed down exactly.** Comparisons of the first row key field with a
  literal of its type (``=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``, and ``LIKE 'p%'`` on
  string keys), combined with ``AND``, choose the leaves planned and the rows read, and
  Spark does not evaluate them again. Other filters stay with Spark.

* **As of** (option ``asOf``: a transaction number of ``sleeper history``, or an ISO 8601
  time). The scan reads the table as it was right after that transaction
  (:mod:`sleeper_ops.query.as_of`): resolved once, when the scan is planned (a time
  becomes the number of the last transaction at or before it), and every input
  partition reads that same state, files only: the write buffer is excluded. Each input
  partition carries the part of the state it reads (its leaf's chain of partitions and
  their references), so the state is rebuilt once, on the driver, not once a task. A time
  before the table's history retention, or a number it never had, fails the planning
  in one line.

Filter pushdown needs ``spark.sql.python.filterPushdown.enabled``; :func:`register` sets it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from sleeper_ops.errors import ConfigError, QueryError
from sleeper_ops.query.runner import exact_key_region
from sleeper_ops.query.sql_keys import Interval, everything, intersect, union
from statestore.errors import NotSupportedError
from statestore.history import AsOfState
from statestore.region import Range, Region
from statestore.state import TableState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from sleeper_ops.api import Sleeper
    from sleeper_ops.config import SleeperConfig
    from statestore.schema import Schema

NAME = "sleeper"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_TYPES = {"IntType": int, "LongType": int, "StringType": str, "ByteArrayType": bytes}


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("sleeper")`` available in ``spark``, with filter pushdown on."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(SleeperDataSource)


def _config(options: Any) -> SleeperConfig:
    """The instance's configuration named by the options (see the module docstring)."""
    from sleeper_ops.config import SleeperConfig

    if options.get("config_file"):
        return SleeperConfig.from_file(options["config_file"])
    home = options.get("home") or os.environ.get("SLEEPER_HOME")
    if not home:
        raise ConfigError("the sleeper data source needs option home or config_file, or SLEEPER_HOME set")
    return SleeperConfig.load(home, create=False)


def _open(home: str, raw: dict[str, Any]) -> Sleeper:
    from pathlib import Path

    from sleeper_ops.api import Sleeper
    from sleeper_ops.config import SleeperConfig

    return Sleeper(config=SleeperConfig.from_dict(Path(home), raw))


class SleeperDataSource(DataSource):
    """``spark.read.format("sleeper")``: one Sleeper table (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _table(self) -> str:
        table = self.options.get("table")
        if not table:
            raise ConfigError("the sleeper data source needs the option table (e.g. .option('table', 'events'))")
        return str(table)

    def schema(self) -> StructType:
        """The table's columns: row keys, sort keys, then values, with their Spark types."""
        from pyspark.sql.pandas.types import from_arrow_schema

        from sleeper_ops.io.arrow_schema import arrow_schema

        cfg = _config(self.options)
        with _open(str(cfg.home.absolute()), cfg.to_dict()) as s:
            return from_arrow_schema(arrow_schema(s.table(self._table()).schema))

    def reader(self, schema: StructType) -> SleeperReader:
        cfg = _config(self.options)
        home, raw = str(cfg.home.absolute()), cfg.to_dict()
        with _open(home, raw) as s:
            key_schema = s.table(self._table()).schema
        as_of = self.options.get("asOf") or self.options.get("asof")
        return SleeperReader(self._table(), home, raw, key_schema, as_of=str(as_of) if as_of else None)


class LeafPartition(InputPartition):
    """One leaf partition to read: ``regions``, its region cut by the pushed key filters;
    ``as_of``: the part of an as-of state it reads (None: the current state and buffer):
    the leaf, its ancestors and their children, the ancestors' and the leaf's references
    and the tombstones, taken on the driver, so a task reads no state of its own."""

    def __init__(self, leaf: str, regions: Sequence[Region], as_of: Optional[AsOfState] = None):
        super().__init__(leaf)
        self.leaf, self.regions, self.as_of = leaf, list(regions), as_of


class SleeperReader(DataSourceReader):
    """Plans one :class:`LeafPartition` per leaf to read and reads each as record batches.
    Pickled to the executors: holds the configuration, never a connection."""

    def __init__(self, table: str, home: str, raw: dict[str, Any], schema: Schema, *, as_of: Optional[str] = None):
        self.table, self.home, self.raw, self.key_schema, self.as_of = table, home, raw, schema, as_of
        first = schema.row_key_fields[0]
        self.key_field, self.key_type = first.name, str(first.type)
        self.intervals: list[Interval] = everything(schema)

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take the filters on the first row key field that are exact key intervals; yield
        the others back to Spark."""
        for f in filters:
            found = self._intervals(f)
            if found is None:
                yield f
            else:
                self.intervals = intersect(self.intervals, found)

    def _value(self, v: Any) -> Optional[Any]:
        if isinstance(v, bytearray):
            v = bytes(v)
        if isinstance(v, bool) or not isinstance(v, _TYPES[self.key_type]):
            return None
        return v

    def _successor(self, v: Any) -> Optional[Any]:
        return exact_key_region(self.key_schema, [v]).ranges[0].max

    def _intervals(self, f: Filter) -> Optional[list[Interval]]:
        """The key intervals holding exactly the rows ``f`` accepts; None if it is not such a filter."""
        if getattr(f, "attribute", None) != (self.key_field,):
            return None
        lowest = everything(self.key_schema)[0][0]
        try:
            if isinstance(f, In):
                values = [self._value(v) for v in f.value]
                if not values or any(v is None for v in values):
                    return None
                out: list[Interval] = []
                for v in values:
                    out = union(out, [(v, self._successor(v))])
                return out
            if isinstance(f, StringStartsWith):
                p = f.value
                if self.key_type != "StringType" or not isinstance(p, str) or not p or ord(p[-1]) >= 0x10FFFF:
                    return None
                return [(p, p[:-1] + chr(ord(p[-1]) + 1))]
            v = self._value(getattr(f, "value", None))
            if v is None:
                return None
            if isinstance(f, EqualTo):
                return [(v, self._successor(v))]
            if isinstance(f, GreaterThanOrEqual):
                return [(v, None)]
            if isinstance(f, GreaterThan):
                nxt = self._successor(v)
                return [] if nxt is None else [(nxt, None)]
            if isinstance(f, LessThan):
                return [(lowest, v)] if v > lowest else []
            if isinstance(f, LessThanOrEqual):
                nxt = self._successor(v)
                return [(lowest, None)] if nxt is None else [(lowest, nxt)]
        except QueryError:  # a value outside the key type's range: leave it to Spark
            return None
        return None

    def partitions(self) -> Sequence[InputPartition]:
        """One :class:`LeafPartition` per leaf overlapping the pushed intervals that has a
        reference in it or an ancestor, from the table's metadata as it is now."""
        from sleeper_ops.query.metadata import TableMetadata

        if not self.intervals:
            return [LeafPartition("", [])]
        with _open(self.home, self.raw) as s:
            info = s.state_store.get_table(self.table)
            if self.as_of is not None:
                from sleeper_ops.query.as_of import FixedMetadata, resolve

                state = resolve(s.state_store, info, self.as_of)
                return (FixedMetadata(s.state_store, info, state).plan(
                    lambda meta: self._plan(meta, False, state)) or [LeafPartition("", [])])
            # read before the plan: a flush in between leaves its records in files the plan sees
            buffered = _buffered(s.state_store, info.table_id)
            return (TableMetadata(s.state_store, info.table_id).plan(lambda meta: self._plan(meta, buffered))
                    or [LeafPartition("", [])])

    def _plan(self, meta: Any, buffered: bool, as_of: Optional[AsOfState] = None) -> list[InputPartition]:
        """The leaves to read: those overlapping the intervals with a reference in them or
        an ancestor, or (``buffered``: the write buffer holds records) all of them."""
        by_leaf: dict[str, list[Region]] = {}
        for lo, hi in self.intervals:
            cut = Range(self.key_field, lo, hi)
            for p in meta.overlapping(Region((cut, *_unbounded(self.key_schema)[1:]))):
                if not p.is_leaf or not (buffered or _has_references(meta, p)):
                    continue
                region = _cut(p.region, cut)
                if region is not None:
                    by_leaf.setdefault(p.id, []).append(region)
        return [LeafPartition(leaf, regions, None if as_of is None else _slice(meta, leaf, as_of))
                for leaf, regions in sorted(by_leaf.items())]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The records of the partition's regions, as Arrow record batches in key order."""
        regions = getattr(partition, "regions", [])
        if not regions:
            return
        with _open(self.home, self.raw) as s:
            as_of = getattr(partition, "as_of", None)
            if as_of is None:
                yield from s.table(self.table).query_batches(regions=regions)
                return
            from sleeper_ops.query.as_of import FixedMetadata
            from sleeper_ops.query.runner import QueryRunner

            info = s.state_store.get_table(self.table)
            runner = QueryRunner(s.state_store, s.objects, info, threads=1, buffer=False,
                                 metadata=FixedMetadata(s.state_store, info, as_of),
                                 python_modules=s.python_iterator_modules)
            try:
                yield from runner.stream(regions)
            finally:
                runner.close()


def _slice(meta: Any, leaf: str, as_of: AsOfState) -> AsOfState:
    """The part of ``as_of`` (planned as ``meta``) a read of ``leaf`` needs: the leaf and
    its ancestors with their references, their children (the walk from the root looks
    them up), and the tombstones."""
    chain, p = [], meta.partitions.get(leaf)
    while p is not None:
        chain.append(p)
        p = meta.partitions.get(p.parent_id) if p.parent_id is not None else None
    parts = {q.id: q for q in chain}
    for q in chain:
        parts.update({c: meta.partitions[c] for c in q.child_ids})
    state = TableState.of(parts.values(), [r for q in chain for r in meta.references_in(q.id)])
    state.tombstones = dict(meta.tombstones)
    return AsOfState(as_of.number, as_of.time_ms, state)


def _unbounded(schema: Schema) -> list[Range]:
    """Unbounded ranges of every row key field."""
    from statestore.schema import min_value

    return [Range(f.name, min_value(f.type), None) for f in schema.row_key_fields]  # type: ignore[arg-type]


def _buffered(state_store: Any, table_id: str) -> bool:
    """Whether the table's write buffer holds records (never, on a backend without one)."""
    try:
        return bool(state_store.buffer_stats(table_id).entries)
    except NotSupportedError:
        return False


def _has_references(meta: Any, p: Any) -> bool:
    while p is not None:
        if meta.references_in(p.id):
            return True
        p = meta.partitions.get(p.parent_id) if p.parent_id is not None else None
    return False


def _cut(region: Region, first: Range) -> Optional[Region]:
    """``region`` with its first range cut to ``first``; None if nothing is left."""
    head = region.ranges[0]
    lo = max(head.min, first.min)
    hi = head.max if first.max is None else (first.max if head.max is None else min(head.max, first.max))
    if hi is not None and hi <= lo:
        return None
    return Region((Range(head.field, lo, hi), *region.ranges[1:]))
