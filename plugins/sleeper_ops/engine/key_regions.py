"""Regions of keys and key ranges, in a table's types: what a query or a delete of
``keys=``/``ranges=`` covers."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from sleeper_ops.errors import QueryError
from statestore.errors import SchemaError
from statestore.region import Range, Region
from statestore.schema import Schema, check_key_value, min_value


def _successor(key_type: str, v: Any) -> Optional[Any]:
    """The least value greater than ``v`` (None if ``v`` is the greatest)."""
    if key_type in ("IntType", "LongType"):
        limit = 2**31 - 1 if key_type == "IntType" else 2**63 - 1
        return None if v == limit else v + 1
    if key_type == "StringType":
        return v + "\x00"
    return v + b"\x00"


def exact_key_region(schema: Schema, key: Sequence[Any]) -> Region:
    """The region holding exactly ``key`` (one value per row key field, or a prefix)."""
    fields = schema.row_key_fields
    if not 1 <= len(key) <= len(fields):
        raise QueryError(f"a key needs 1 to {len(fields)} values (row key fields "
                         f"{', '.join(schema.row_key_names)}), got {len(key)}")
    ranges = []
    for i, f in enumerate(fields):
        if i < len(key):
            try:
                v = check_key_value(f.type, key[i], f.name)  # type: ignore[arg-type]
            except SchemaError as e:
                raise QueryError(str(e)) from e
            ranges.append(Range(f.name, v, _successor(f.type, v)))  # type: ignore[arg-type]
        else:
            ranges.append(Range(f.name, min_value(f.type), None))  # type: ignore[arg-type]
    return Region(tuple(ranges))


def exact_key_of(schema: Schema, region: Region) -> Optional[tuple[str, Any]]:
    """``(field, value)`` when ``region`` is :func:`exact_key_region` of one value of its
    first range's row key field (``[v, successor of v)``) with every other field whole,
    else None."""
    types = {f.name: f.type for f in schema.row_key_fields}
    first, rest = region.ranges[0], region.ranges[1:]
    if first.field not in types or first.max is None:
        return None
    if any(r.field not in types or r.max is not None or r.min != min_value(types[r.field])  # type: ignore[arg-type]
           for r in rest):
        return None
    value = only_value(types[first.field], first)  # type: ignore[arg-type]
    return None if value is None else (first.field, value)


def only_value(key_type: str, r: Range) -> Optional[Any]:
    """The one value of a row key field of type ``key_type`` that ``r`` holds when it
    holds exactly one (``[v, successor of v)``), else None."""
    if r.max is None or r.min is None:
        return None
    return r.min if r.max == _successor(key_type, r.min) else None


def range_region(schema: Schema, lo: Any, hi: Optional[Any]) -> Region:
    """``[lo, hi)`` on the first row key field (``hi=None``: unbounded); others unbounded."""
    first = schema.row_key_fields[0]
    try:
        lo = check_key_value(first.type, lo, first.name)  # type: ignore[arg-type]
        if hi is not None:
            hi = check_key_value(first.type, hi, first.name)  # type: ignore[arg-type]
    except SchemaError as e:
        raise QueryError(str(e)) from e
    if hi is not None and hi <= lo:
        raise QueryError(f"range [{lo!r}, {hi!r}) is empty: the maximum must be greater than the minimum")
    ranges = [Range(first.name, lo, hi)]
    ranges += [Range(f.name, min_value(f.type), None) for f in schema.row_key_fields[1:]]  # type: ignore[arg-type]
    return Region(tuple(ranges))
