"""The JSON codec of keys and records, shared by the CLI, the REST app and the readers.

Keys: a JSON value, or a JSON array of one value per row key field; bytes as base64
strings. Records: JSON objects keyed by field name; bytes as base64, maps as objects,
lists as arrays, integers range-checked for their type. A key that does not fit is a
:class:`~sleeper_ops.errors.QueryError`, a value a ``ValueError``, each naming what is
wrong, so callers turn it into a 4xx or a CLI message. Whole JSON records become a
batch in :func:`sleeper_ops.io.inputs.records_to_batch`.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Iterator, Optional

import pyarrow as pa

from sleeper_ops.errors import QueryError
from statestore.errors import SchemaError
from statestore.schema import ListType, MapType, Schema, key_from_json, min_value


# ----- keys -----------------------------------------------------------------------------
def parse_key(schema: Schema, text: str) -> list[Any]:
    """A key given as JSON: one value, or a JSON array of one value per row key field."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise QueryError(f"key {text!r} is not JSON (strings need quotes: '\"abc\"')") from e
    fields = schema.row_key_fields
    if isinstance(raw, list):
        values = raw
        if not values:
            raise QueryError(f"key {text!r} is an empty array")
    else:
        values = [raw]
    if len(values) > len(fields):
        raise QueryError(f"key {text!r} has {len(values)} values; the table has {len(fields)} row key fields")
    try:
        return [key_from_json(f.type, v, f.name) for f, v in zip(fields, values)]  # type: ignore[arg-type]
    except SchemaError as e:
        raise QueryError(f"key {text!r}: {e}") from e


def parse_range(schema: Schema, lo: str, hi: str) -> tuple[Any, Optional[Any]]:
    """``[lo, hi)`` on the first row key field from JSON values; ``null`` at either end is
    unbounded (a null start is the least value of the field's type, a null end None)."""
    first = schema.row_key_fields[0]
    try:
        lo_raw, hi_raw = json.loads(lo), json.loads(hi)
    except json.JSONDecodeError as e:
        raise QueryError(f"range {lo!r} {hi!r} is not JSON (strings need quotes)") from e
    try:
        lo_v = (min_value(first.type) if lo_raw is None  # type: ignore[arg-type]
                else key_from_json(first.type, lo_raw, first.name))  # type: ignore[arg-type]
        hi_v = None if hi_raw is None else key_from_json(first.type, hi_raw, first.name)  # type: ignore[arg-type]
    except SchemaError as e:
        raise QueryError(f"range {lo} {hi}: {e}") from e
    return lo_v, hi_v


# ----- JSON values in -------------------------------------------------------------------
_INT_RANGE = {"IntType": (-(2**31), 2**31 - 1), "LongType": (-(2**63), 2**63 - 1)}


def _json_primitive(t: str, v: Any, what: str) -> Any:
    """The Python value of JSON value ``v`` for primitive type ``t``; ValueError if it does not fit."""
    if v is None:
        return None
    if t in _INT_RANGE:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{what} {json.dumps(v)} is not an integer")
        lo, hi = _INT_RANGE[t]
        if not lo <= v <= hi:
            raise ValueError(f"{what} {v} is out of range for {t}")
        return v
    if not isinstance(v, str):
        raise ValueError(f"{what} {json.dumps(v)} is not a string")
    if t == "ByteArrayType":
        try:
            return base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{what} {v!r} is not base64") from None
    return v


def _json_map_key(t: str, k: str) -> Any:
    if t in _INT_RANGE:
        try:
            return _json_primitive(t, int(k), "map key")
        except ValueError:
            raise ValueError(f"map key {k!r} is not an integer") from None
    return _json_primitive(t, k, "map key")


def json_value(t: object, v: Any) -> Any:
    """The Python value of JSON value ``v`` for field type ``t``; ValueError if it does not fit."""
    if v is None:
        return None
    if isinstance(t, MapType):
        if not isinstance(v, dict):
            raise ValueError(f"{json.dumps(v)} is not a JSON object")
        return [(_json_map_key(t.key_type, k), _json_primitive(t.value_type, x, "map value")) for k, x in v.items()]
    if isinstance(t, ListType):
        if not isinstance(v, list):
            raise ValueError(f"{json.dumps(v)} is not a JSON array")
        return [_json_primitive(t.element_type, x, "element") for x in v]
    return _json_primitive(t, v, "value")  # type: ignore[arg-type]


def records_json(table: pa.Table) -> list[dict[str, Any]]:
    """``table``'s rows as JSON-ready dicts (bytes as base64, maps as objects)."""
    return list(row_dicts(table, {f.name for f in table.schema if pa.types.is_map(f.type)}))


# ----- JSON values out ------------------------------------------------------------------
def jsonable(v: Any) -> Any:
    """A value read from Arrow as JSON: bytes as base64, maps (lists of pairs) as objects."""
    if isinstance(v, bytes):
        return base64.b64encode(v).decode("ascii")
    if isinstance(v, list):
        if v and isinstance(v[0], tuple) and len(v[0]) == 2:
            return {str(jsonable(k)): jsonable(x) for k, x in v}
        return [jsonable(x) for x in v]
    return v


def row_dicts(table: pa.Table, map_fields: set[str]) -> Iterator[dict[str, Any]]:
    """The rows of ``table`` as JSON-ready dicts; ``map_fields`` are written as objects."""
    for batch in table.to_batches(max_chunksize=8192):
        for row in batch.to_pylist():
            yield {k: ({str(jsonable(a)): jsonable(b) for a, b in v} if k in map_fields and v is not None
                       else jsonable(v)) for k, v in row.items()}
