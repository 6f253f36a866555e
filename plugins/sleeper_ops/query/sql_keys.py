"""Key regions from SQL predicates: which rows of a table a scan can possibly need.

DataFusion hands a table scan its pushed-down filters (a conjunction of expressions).
:func:`key_regions` turns the ones on the table's first row key field into disjoint
regions of that field, such that **every row satisfying all the filters lies in one of
them**. It is an over-approximation: a predicate it does not understand (a function
call, a cast, ``LIKE``, a comparison with another column, ``NOT``, ``!=``, a predicate
on another field) restricts nothing, so the regions may hold rows the filters reject,
but never miss a row they accept. Exact filtering stays with the scan (see
:mod:`sleeper_ops.query.sql`), unless :func:`key_intervals_exact` finds every filter
made of understood predicates: the regions then hold exactly the rows the filters
accept, and the scan need not filter again.

Understood: ``key = v``, ``<``, ``<=``, ``>``, ``>=`` (either side), ``IN (...)``,
``BETWEEN`` and any ``AND``/``OR`` of these, where ``v`` is a literal of the key's
type (SQL's ``BETWEEN`` and short ``IN`` lists reach us already rewritten by
DataFusion's optimizer into comparisons).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from sleeper_ops.errors import QueryError
from sleeper_ops.query.runner import exact_key_region, range_region
from statestore.region import Region
from statestore.schema import Schema, min_value

#: ``[lo, hi)`` of the first row key field; ``hi=None`` is unbounded above.
Interval = tuple[Any, Optional[Any]]

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}


class _Keys:
    """Interval arithmetic on the first row key field of ``schema``."""

    def __init__(self, schema: Schema):
        self.schema = schema
        first = schema.row_key_fields[0]
        self.field, self.type = first.name, first.type
        self.everything: list[Interval] = [(min_value(first.type), None)]  # type: ignore[arg-type]

    def value(self, literal: Any) -> Optional[Any]:
        """The literal's Python value when it has the key's type (else None: not understood)."""
        try:
            v = literal.python_value()
            v = v.as_py() if hasattr(v, "as_py") else v
        except Exception:  # a literal pyarrow cannot convert: restricts nothing
            return None
        expected = {"IntType": int, "LongType": int, "StringType": str, "ByteArrayType": bytes}[str(self.type)]
        if isinstance(v, bool) or not isinstance(v, expected):
            return None
        return v

    def successor(self, v: Any) -> Optional[Any]:
        """The least key value above ``v`` (None when ``v`` is the greatest)."""
        try:
            return exact_key_region(self.schema, [v]).ranges[0].max
        except QueryError:  # out of the key type's range
            return None

    def compare(self, op: str, v: Any) -> Optional[list[Interval]]:
        lo_min = self.everything[0][0]
        if op == "=":
            return [(v, self.successor(v))]
        if op == ">=":
            return [(v, None)]
        if op == ">":
            nxt = self.successor(v)
            return [] if nxt is None else [(nxt, None)]
        if op == "<":
            return [(lo_min, v)] if v > lo_min else []
        if op == "<=":
            nxt = self.successor(v)
            return self.everything if nxt is None else [(lo_min, nxt)]
        return None

    @staticmethod
    def _is_false(literal: Any) -> bool:
        """True for the literal ``false`` (DataFusion's rewrite of a contradiction)."""
        try:
            v = literal.python_value()
            return (v.as_py() if hasattr(v, "as_py") else v) is False
        except Exception:  # a literal pyarrow cannot convert
            return False

    def is_key(self, expr: Any) -> bool:
        return bool(expr.variant_name() == "Column" and expr.to_variant().name() == self.field)

    def intervals(self, expr: Any) -> tuple[list[Interval], bool]:
        """Intervals holding every row for which ``expr`` is true, and whether they hold
        only those (``expr`` made only of the predicates the module docstring lists)."""
        try:
            kind = expr.variant_name()
            v = expr.to_variant()
        except Exception:  # an expression the bindings cannot describe: restricts nothing
            return self.everything, False
        if kind == "Literal" and self._is_false(expr):
            return [], True
        if kind == "Alias":
            return self.intervals(v.expr())
        if kind == "BinaryExpr":
            op = str(v.op()).upper()
            left, right = v.left(), v.right()
            if op in ("AND", "OR"):
                (a, a_exact), (b, b_exact) = self.intervals(left), self.intervals(right)
                return (intersect(a, b) if op == "AND" else union(a, b)), a_exact and b_exact
            if op in _FLIP:
                if self.is_key(right) and left.variant_name() == "Literal":
                    left, right, op = right, left, _FLIP[op]
                if self.is_key(left) and right.variant_name() == "Literal":
                    value = self.value(right)
                    if value is not None:
                        found = self.compare(op, value)
                        if found is not None:
                            return found, True
            return self.everything, False
        if kind == "InList" and not v.negated() and self.is_key(v.expr()):
            out: list[Interval] = []
            for item in v.list():
                value = self.value(item) if item.variant_name() == "Literal" else None
                if value is None:
                    return self.everything, False
                out = union(out, [(value, self.successor(value))])
            return out, True
        if kind == "Between" and not v.negated() and self.is_key(v.expr()):
            lo, hi = (self.value(x) if x.variant_name() == "Literal" else None for x in (v.low(), v.high()))
            if lo is None or hi is None:
                return self.everything, False
            return intersect(self.compare(">=", lo) or [], self.compare("<=", hi) or []), True
        return self.everything, False


def _hi_key(hi: Optional[Any]) -> tuple[int, Any]:
    return (1, None) if hi is None else (0, hi)


def _lower_hi(a: Optional[Any], b: Optional[Any]) -> Optional[Any]:
    return b if a is None else a if b is None else min(a, b)


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """The intervals common to ``a`` and ``b`` (each sorted and disjoint); sorted, disjoint."""
    out = []
    for lo1, hi1 in a:
        for lo2, hi2 in b:
            lo, hi = max(lo1, lo2), _lower_hi(hi1, hi2)
            if hi is None or lo < hi:
                out.append((lo, hi))
    return union(out, [])


def union(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """The intervals covering ``a`` or ``b``, merged where they meet; sorted, disjoint."""
    out: list[Interval] = []
    for lo, hi in sorted([*a, *b], key=lambda iv: (iv[0], _hi_key(iv[1]))):
        if out and (out[-1][1] is None or lo <= out[-1][1]):
            prev_lo, prev_hi = out[-1]
            out[-1] = (prev_lo, None if prev_hi is None or hi is None else max(prev_hi, hi))
        else:
            out.append((lo, hi))
    return out


def key_intervals(schema: Schema, filters: Sequence[Any]) -> list[Interval]:
    """Disjoint, sorted intervals of the first row key field holding every row that
    satisfies all ``filters`` (DataFusion expressions, taken as a conjunction); the whole
    key space when none of them restricts the key; empty when no row can satisfy them."""
    return key_intervals_exact(schema, filters)[0]


def key_intervals_exact(schema: Schema, filters: Sequence[Any]) -> tuple[list[Interval], bool]:
    """:func:`key_intervals`, and whether the intervals hold only rows that satisfy the
    filters: every filter made of the predicates the module docstring lists (a row of a
    key in them then satisfies them all, whatever its other fields)."""
    keys = _Keys(schema)
    out, exact = keys.everything, True
    for f in filters:
        found, found_exact = keys.intervals(f)
        out, exact = intersect(out, found), exact and found_exact
    return out, exact


def everything(schema: Schema) -> list[Interval]:
    """The whole key space of the first row key field, as intervals."""
    return _Keys(schema).everything


def regions_of(schema: Schema, intervals: Sequence[Interval]) -> list[Region]:
    """``intervals`` as query regions (other row key fields unbounded)."""
    return [range_region(schema, lo, hi) for lo, hi in intervals]
