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


def key_scalar(value: object, type_: pa.DataType) -> pa.Scalar:
    """``pa.scalar(value, type_)`` for a row key value (int, long, string, bytes), built
    from raw buffers: pyarrow's conversion from Python objects imports pandas to check
    for pandas inputs, which costs a new process (each ``sleeper query``) about half a
    second. Other types go through ``pa.scalar``."""
    import struct

    if isinstance(value, int) and not isinstance(value, bool) and type_ in (pa.int32(), pa.int64()):
        fmt = "<i" if type_ == pa.int32() else "<q"
        return pa.Array.from_buffers(type_, 1, [None, pa.py_buffer(struct.pack(fmt, value))])[0]
    if (isinstance(value, str) and type_ == pa.string()) or (isinstance(value, bytes) and type_ == pa.binary()):
        data = value.encode() if isinstance(value, str) else value
        offsets = pa.py_buffer(struct.pack("<ii", 0, len(data)))
        return pa.Array.from_buffers(type_, 1, [None, offsets, pa.py_buffer(data)])[0]
    return pa.scalar(value, type_)
