"""Table iterators: age-off, user iterators and aggregation over Arrow batches.

Compaction applies a table's iterators to the merged, key-ordered rows it writes;
queries apply them to their merged, key-ordered result. Three kinds exist, set by
table properties, and are applied in this order:

1. Age-off (``sleeper.table.iterator.ageoff`` = ``FIELD:MAX_AGE_MS``): keeps records
   whose ``FIELD`` (an int or long of epoch milliseconds; key or value field) is at
   least ``now - MAX_AGE_MS``, and records whose ``FIELD`` is null. ``now`` is fixed
   per :meth:`IteratorChain.apply` call (or given as ``now_ms``).
2. User iterators: the callable named by ``sleeper.table.iterator.python``
   (``module.path:function``, from a module the deployment allows:
   :mod:`sleeper_ops.engine.user_iterators`), then any passed in code. Each takes one
   ``pa.RecordBatch`` with the table's Arrow schema and returns a batch with that
   schema (or ``None`` to drop it). It may filter or change rows but must keep them
   in key order. The callable must be importable wherever the chain runs, including
   Spark executors, which rebuild the chain from the table.
3. Aggregation (``sleeper.table.iterator.aggregation`` = ``sum(a),max(b),min(c)``):
   records with equal key fields (row keys and sort keys) become one record; each
   value field gets its operation. Every value field must be named once. ``sum``
   takes int and long fields and wraps on overflow like Sleeper's Java ``int`` and
   ``long`` arithmetic; ``min`` and ``max`` take int, long, string (code point
   order) and bytes (unsigned order). Nulls are ignored; a group with only nulls
   gives null. Map and list fields cannot be aggregated.

The chain streams: it holds at most one batch plus one carried record (the last
key of the previous batch, whose group may continue in the next), so memory does
not grow with the input. Aggregation finds runs of equal keys with Arrow compute
and reduces them in Arrow's group-by, never row-by-row Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence, TypeVar

import pyarrow as pa

from sleeper_ops.engine.user_iterators import BatchFn, UserIterator
from sleeper_ops.errors import ConfigError, IteratorError
from sleeper_ops.io.arrow_schema import arrow_schema
from statestore import clock
from statestore.catalog import TableInfo
from statestore.properties import ITERATOR_AGEOFF, ITERATOR_AGGREGATION, ITERATOR_PYTHON
from statestore.schema import Schema, type_name

_T = TypeVar("_T")


_NUMERIC = ("IntType", "LongType")
_ORDERED = ("IntType", "LongType", "StringType", "ByteArrayType")
_AGG_RE = re.compile(r"^\s*(sum|min|max)\(\s*([^()]*?)\s*\)\s*$")


# ----- age-off ----------------------------------------------------------------------------

@dataclass(frozen=True)
class AgeOff:
    """Keep records whose ``field`` is null or at least ``now - max_age_ms``."""

    field: str
    max_age_ms: int

    @classmethod
    def parse(cls, value: str, schema: Schema) -> AgeOff:
        name, _, age = value.partition(":")
        name = name.strip()
        try:
            max_age = int(age)
        except ValueError as e:
            raise ConfigError(f"{ITERATOR_AGEOFF}={value!r}: expected FIELD:MAX_AGE_MS") from e
        if name not in schema.field_names:
            raise ConfigError(f"{ITERATOR_AGEOFF}={value!r}: the schema has no field {name!r} "
                              f"(fields: {', '.join(schema.field_names)})")
        ftype = schema.field(name).type
        if ftype not in _NUMERIC:
            raise ConfigError(f"{ITERATOR_AGEOFF}={value!r}: field {name!r} is {type_name(ftype)}; "
                              "age-off needs an IntType or LongType field of epoch milliseconds")
        return cls(name, max_age)

    def filter(self, batch: pa.RecordBatch, now_ms: int) -> pa.RecordBatch:
        import pyarrow.compute as pc

        col = batch.column(self.field)
        keep = pc.greater_equal(col.cast(pa.int64()), pa.scalar(now_ms - self.max_age_ms, pa.int64()))
        if col.null_count:
            keep = pc.or_kleene(keep, pc.is_null(col))
        return batch.filter(keep)

    def describe(self) -> str:
        return f"ageoff({self.field}, {self.max_age_ms})"


# ----- aggregation ------------------------------------------------------------------------

@dataclass(frozen=True)
class Aggregation:
    """Combine records with equal keys; ``ops`` maps each value field to sum, min or max."""

    key_names: tuple[str, ...]
    ops: tuple[tuple[str, str], ...]  # (value field, op) in the property's order

    @classmethod
    def parse(cls, value: str, schema: Schema) -> Aggregation:
        where = f"{ITERATOR_AGGREGATION}={value!r}"
        key_names = set(schema.key_names)
        value_types = {f.name: f.type for f in schema.value_fields}
        ops: list[tuple[str, str]] = []
        seen: set[str] = set()
        for part in value.split(","):
            m = _AGG_RE.match(part)
            if not m:
                raise ConfigError(f"{where}: {part.strip()!r} is not sum(FIELD), min(FIELD) or max(FIELD)")
            op, name = m.group(1), m.group(2)
            if name in key_names:
                raise ConfigError(f"{where}: {name!r} is a key field; only value fields are aggregated "
                                  "(records with equal row and sort keys are combined)")
            if name not in value_types:
                raise ConfigError(f"{where}: the schema has no value field {name!r} "
                                  f"(value fields: {', '.join(value_types) or 'none'})")
            if name in seen:
                raise ConfigError(f"{where}: field {name!r} is named more than once")
            seen.add(name)
            ftype = value_types[name]
            if op == "sum" and ftype not in _NUMERIC:
                raise ConfigError(f"{where}: sum({name}) needs an IntType or LongType field; "
                                  f"{name!r} is {type_name(ftype)}")
            if op in ("min", "max") and ftype not in _ORDERED:
                raise ConfigError(f"{where}: {op}({name}) needs an int, long, string or bytes field; "
                                  f"{name!r} is {type_name(ftype)}")
            ops.append((name, op))
        missing = [n for n in value_types if n not in seen]
        if missing:
            raise ConfigError(f"{where}: every value field needs an aggregation; missing "
                              f"{', '.join(missing)}")
        return cls(tuple(schema.key_names), tuple(ops))

    def aggregate(self, table: pa.Table, target: pa.Schema) -> pa.Table:
        """One record per run of equal keys in ``table`` (which is in key order), in order.

        Groups are the runs of equal keys, found by comparing each row's keys with
        the previous row's; a table with no repeated key comes back unchanged.
        (Arrow's hash group-by alone does not keep first-appearance order for
        several key columns, so the groups are numbered here and put back in order.)
        """
        import pyarrow.compute as pc

        n = table.num_rows
        if n < 2:
            return table
        change = None
        for name in self.key_names:
            col = table.column(name)
            differs = pc.not_equal(col.slice(1), col.slice(0, n - 1))
            change = differs if change is None else pc.or_(change, differs)
        assert change is not None  # a schema has at least one row key field
        if isinstance(change, pa.ChunkedArray):
            change = change.combine_chunks()
        starts = pc.indices_nonzero(change)
        if len(starts) == n - 1:
            return table  # every key appears once
        first_rows = pa.concat_arrays([pa.array([0], pa.uint64()), pc.add(starts, pa.scalar(1, pa.uint64()))])
        group = pa.concat_arrays([pa.array([0], pa.int64()),
                                  pc.cumulative_sum(change.cast(pa.int64()))])
        values = table.select([name for name, _ in self.ops]).append_column("__group", group)
        grouped = values.group_by("__group", use_threads=False).aggregate(list(self.ops))
        grouped = grouped.take(pc.sort_indices(grouped.column("__group")))
        keys = table.select(list(self.key_names)).take(first_rows)
        ops = dict(self.ops)
        columns = []
        for f in target:
            col = keys.column(f.name) if f.name not in ops else grouped.column(f"{f.name}_{ops[f.name]}")
            if col.type != f.type:
                col = col.cast(f.type, safe=False)  # int sums come back as int64: wrap like Java int
            columns.append(col)
        return pa.Table.from_arrays(columns, schema=target)

    def stream(self, batches: Iterable[pa.RecordBatch], target: pa.Schema) -> Iterator[pa.RecordBatch]:
        """Aggregate key-ordered batches; a key's records may span any number of batches.

        The last aggregated record of each batch is held back and merged with the
        next batch, since its key may continue there; it is emitted at the end.
        """
        carry: Optional[pa.RecordBatch] = None
        for batch in batches:
            if not batch.num_rows:
                continue
            parts = [batch] if carry is None else [carry, batch]
            out = self.aggregate(pa.Table.from_batches(parts, schema=target), target).combine_chunks()
            rows = out.to_batches()[0]
            if rows.num_rows > 1:
                yield rows.slice(0, rows.num_rows - 1)
            carry = rows.slice(rows.num_rows - 1)
        if carry is not None:
            yield carry

    def describe(self) -> str:
        return "aggregation(" + ", ".join(f"{op}({name})" for name, op in self.ops) + ")"


# ----- checking a table's iterator properties ----------------------------------------------

ITERATOR_PROPERTIES = (ITERATOR_AGEOFF, ITERATOR_PYTHON, ITERATOR_AGGREGATION)


class _PropertyProblem(Exception):
    def __init__(self, name: str, reason: str):
        super().__init__(name, reason)
        self.name, self.reason = name, reason


def _parse(schema: Schema, props: Mapping[str, str], python_modules: Sequence[str]
           ) -> tuple[Optional[AgeOff], Optional[UserIterator], Optional[Aggregation]]:
    """The iterators ``props`` configure for ``schema`` (a Python iterator only from
    ``python_modules``); a bad one raises _PropertyProblem."""
    def parsed(name: str, parse: Callable[[str], _T]) -> Optional[_T]:
        value = props.get(name)
        if not value:
            return None
        try:
            return parse(value)
        except ConfigError as e:
            raise _PropertyProblem(name, str(e)) from e
    return (parsed(ITERATOR_AGEOFF, lambda v: AgeOff.parse(v, schema)),
            parsed(ITERATOR_PYTHON, lambda v: UserIterator.load(v, python_modules)),
            parsed(ITERATOR_AGGREGATION, lambda v: Aggregation.parse(v, schema)))


def check_iterator_properties(schema: Schema, props: Mapping[str, str], python_modules: Sequence[str] = (), *,
                              table: str = "") -> None:
    """Refuse (:class:`ConfigError`, with the reason, naming ``table``) iterator
    properties in ``props`` that do not fit ``schema``, or whose user callable is not
    from ``python_modules`` (checked before importing it) or cannot be imported; called
    when properties are set, so a table never holds a chain its queries cannot build.
    Properties with empty values (being cleared) and other properties are ignored."""
    try:
        _parse(schema, {k: v for k, v in props.items() if k in ITERATOR_PROPERTIES and v}, python_modules)
    except _PropertyProblem as e:
        raise ConfigError(f"table {table!r}: {e.reason}" if table else e.reason) from e


# ----- the chain --------------------------------------------------------------------------

def _rebuild(table: TableInfo, extra: tuple[BatchFn, ...], now_ms: Optional[int],
             python_modules: tuple[str, ...] = ()) -> IteratorChain:
    return IteratorChain.for_table(table, extra, now_ms=now_ms, python_modules=python_modules)


class IteratorChain:
    """A table's iterators in order: age-off, user iterators, aggregation.

    Build it with :meth:`for_table`, which checks the properties against the schema
    and imports the user callable if its module is allowed (raising
    :class:`ConfigError`). Applying it never changes the input. A chain pickles as
    ``(table, extra, now_ms, python_modules)`` and is rebuilt on unpickling, so it
    can be shipped to Spark executors as long as the user callables are importable
    there (``extra`` callables are pickled by reference, so they must be module-level
    functions or other picklable callables).
    """

    def __init__(self, table: TableInfo, extra: tuple[BatchFn, ...], now_ms: Optional[int],
                 ageoff: Optional[AgeOff], users: tuple[UserIterator, ...], aggregation: Optional[Aggregation],
                 python_modules: tuple[str, ...] = ()):
        self.table, self.extra, self.now_ms, self.python_modules = table, extra, now_ms, python_modules
        self.ageoff, self.users, self.aggregation = ageoff, users, aggregation
        self.target = arrow_schema(table.schema)
        self._key_names = tuple(table.schema.key_names)

    @classmethod
    def for_table(cls, table: TableInfo, extra: Sequence[BatchFn] = (), *,
                  now_ms: Optional[int] = None, python_modules: Sequence[str] = ()) -> IteratorChain:
        """The chain of ``table``'s iterator properties, with ``extra`` user iterators.

        ``now_ms`` fixes age-off's clock; by default each :meth:`apply` call reads
        the clock once when it starts. ``python_modules``: the deployment's
        ``iterators.python_modules`` (default none); a Python iterator from another
        module raises ConfigError naming the table, and is not imported.
        """
        try:
            ageoff, user, aggregation = _parse(table.schema, table.properties, python_modules)
        except _PropertyProblem as e:
            raise ConfigError(f"table {table.name!r}: {e.reason}; fix it with 'sleeper table set {table.name} "
                              f"{e.name}=...' or clear it with 'sleeper table unset {table.name} {e.name}'") from e
        users = [user] if user is not None else []
        for fn in extra:
            if not callable(fn):
                raise ConfigError(f"iterator {fn!r} is not callable")
            users.append(UserIterator.wrap(fn))
        return cls(table, tuple(extra), now_ms, ageoff, tuple(users), aggregation, tuple(python_modules))

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild, (self.table, self.extra, self.now_ms, self.python_modules))

    @property
    def is_empty(self) -> bool:
        """True when no iterator is configured: applying the chain changes nothing."""
        return self.ageoff is None and not self.users and self.aggregation is None

    def describe(self) -> str:
        """The iterators in order, e.g. ``ageoff(ts, 86400000) | mod:fn | aggregation(sum(a))``."""
        parts = []
        if self.ageoff is not None:
            parts.append(self.ageoff.describe())
        parts += [u.name for u in self.users]
        if self.aggregation is not None:
            parts.append(self.aggregation.describe())
        return " | ".join(parts) if parts else "none"

    def apply(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield the key-ordered ``batches`` with the iterators applied, streaming.

        Input batches must have the table's Arrow schema (types may differ only where
        a cast makes them equal) and be in key order across batches. Empty batches
        are not yielded.
        """
        it: Iterable[pa.RecordBatch] = self._conform(batches)
        if self.ageoff is not None:
            now = self.now_ms if self.now_ms is not None else clock.now_ms()
            it = self._ageoff(it, self.ageoff, now)
        for user in self.users:
            it = self._user(it, user)
        if self.aggregation is not None:
            it = self.aggregation.stream(it, self.target)
        for b in it:
            if b.num_rows:
                yield b

    def apply_table(self, table: pa.Table) -> pa.Table:
        """The key-ordered ``table`` with the iterators applied."""
        if self.is_empty:
            return table
        batches = list(self.apply(table.to_batches()))
        return pa.Table.from_batches(batches, schema=self.target)

    # ----- steps ----------------------------------------------------------------------------
    def _conform(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            if not b.num_rows:
                continue
            if not b.schema.equals(self.target):
                try:
                    b = b.select(self.target.names).cast(self.target)
                except (KeyError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise IteratorError(f"iterator input does not fit table {self.table.name!r}: "
                                        f"got\n{b.schema}\nexpected\n{self.target}") from e
            yield b

    @staticmethod
    def _ageoff(batches: Iterable[pa.RecordBatch], ageoff: AgeOff, now_ms: int) -> Iterator[pa.RecordBatch]:
        for b in batches:
            out = ageoff.filter(b, now_ms)
            if out.num_rows:
                yield out

    def _user(self, batches: Iterable[pa.RecordBatch], user: UserIterator) -> Iterator[pa.RecordBatch]:
        for b in batches:
            out = user.apply(b, self.target, self._key_names)
            if out is not None and out.num_rows:
                yield out
