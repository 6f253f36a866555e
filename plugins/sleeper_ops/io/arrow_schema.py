"""Arrow and Parquet views of a table schema."""

from __future__ import annotations

import pyarrow as pa

from statestore.schema import ListType, MapType, Schema

_PRIMITIVE = {"IntType": pa.int32(), "LongType": pa.int64(), "StringType": pa.string(),
              "ByteArrayType": pa.binary()}


def arrow_type(t: object) -> pa.DataType:
    if isinstance(t, MapType):
        return pa.map_(_PRIMITIVE[t.key_type], _PRIMITIVE[t.value_type])
    if isinstance(t, ListType):
        return pa.list_(_PRIMITIVE[t.element_type])
    return _PRIMITIVE[t]  # type: ignore[index]


def arrow_schema(schema: Schema) -> pa.Schema:
    """Arrow schema of a table: row keys and sort keys non-nullable, then values."""
    fields = [pa.field(f.name, arrow_type(f.type), nullable=False)
              for f in schema.row_key_fields + schema.sort_key_fields]
    fields += [pa.field(f.name, arrow_type(f.type), nullable=True) for f in schema.value_fields]
    return pa.schema(fields)


def sort_keys(schema: Schema) -> list[tuple[str, str]]:
    """Arrow sort keys: row keys then sort keys, ascending."""
    return [(n, "ascending") for n in schema.key_names]


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of no rows with ``schema``. (``pa.Schema.empty_table`` imports pandas,
    which costs a new process about half a second.)"""
    return pa.Table.from_batches([], schema=schema)
