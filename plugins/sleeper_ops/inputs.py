"""Reading user files to ingest: Parquet, CSV and JSON Lines, local or on S3.

Every batch is conformed to the table schema: a column missing, extra, of a type
that cannot be read as the schema's, or null in a key field is refused with an
:class:`IngestError` naming the file and the column. In CSV and JSON Lines, bytes
fields are base64 strings; JSON Lines carries maps as objects and lists as arrays.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from typing import Iterator, Optional

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pyarrow.parquet as pq

from sleeper_ops.arrow_schema import arrow_schema
from sleeper_ops.errors import IngestError
from sleeper_ops.storage import S3Options
from statestore.schema import ListType, MapType, Schema

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl",
           ".json": "jsonl"}


def detect_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise IngestError(f"{path}: unknown file type {ext or '(none)'}; expected .parquet, .csv or .jsonl")
    return FORMATS[ext]


def resolve(path: str, s3: Optional[S3Options] = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of a local path or ``s3://`` URI."""
    if path.startswith("s3://"):
        o = s3 or S3Options()
        kwargs = {k: v for k, v in dict(endpoint_override=o.endpoint_override, scheme=o.scheme, region=o.region,
                                        access_key=o.access_key, secret_key=o.secret_key).items() if v}
        return pafs.S3FileSystem(**kwargs), path[len("s3://"):]
    return pafs.LocalFileSystem(), os.path.abspath(path)


def check_readable(path: str, s3: Optional[S3Options] = None) -> int:
    """Raise IngestError unless ``path`` is a readable file; return its size in bytes."""
    detect_format(path)
    fs, p = resolve(path, s3)
    try:
        info = fs.get_file_info(p)
    except OSError as e:
        raise IngestError(f"{path}: cannot be read: {e}") from e
    if info.type != pafs.FileType.File:
        raise IngestError(f"{path}: no such file")
    return info.size or 0


def conform(batch: pa.RecordBatch, schema: Schema, source: str) -> pa.RecordBatch:
    """``batch`` with exactly the schema's columns and types, or IngestError."""
    target = arrow_schema(schema)
    names = set(batch.schema.names)
    for f in target:
        if f.name not in names:
            raise IngestError(f"{source}: column {f.name!r} of the table schema is missing")
    for n in batch.schema.names:
        if n not in target.names:
            raise IngestError(f"{source}: column {n!r} is not in the table schema")
    cols = []
    for f in target:
        c = batch.column(f.name)
        if c.type != f.type:
            sf = schema.field(f.name)
            if sf.type == "ByteArrayType" and (pa.types.is_string(c.type) or pa.types.is_large_string(c.type)):
                c = _decode_base64(c, source, f.name)
            else:
                try:
                    c = c.cast(f.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                    raise IngestError(f"{source}: column {f.name!r} holds {c.type}, which cannot be read as "
                                      f"{_type_name(sf.type)}: {e}") from e
        if not f.nullable and c.null_count:
            raise IngestError(f"{source}: key column {f.name!r} has {c.null_count} null values")
        cols.append(c)
    return pa.RecordBatch.from_arrays(cols, schema=target)


def _type_name(t: object) -> str:
    if isinstance(t, MapType):
        return f"MapType({t.key_type}, {t.value_type})"
    if isinstance(t, ListType):
        return f"ListType({t.element_type})"
    return str(t)


def _decode_base64(col: pa.Array, source: str, name: str) -> pa.Array:
    try:
        return pa.array([None if v is None else base64.b64decode(v, validate=True) for v in col.to_pylist()],
                        pa.binary())
    except (binascii.Error, ValueError) as e:
        raise IngestError(f"{source}: column {name!r} is ByteArrayType and must hold base64 strings: {e}") from e


def read_batches(path: str, schema: Schema, s3: Optional[S3Options] = None,
                 batch_rows: int = 262_144) -> Iterator[pa.RecordBatch]:
    """Yield the records of one input file as conformed batches."""
    fmt = detect_format(path)
    fs, p = resolve(path, s3)
    try:
        if fmt == "parquet":
            yield from _parquet(fs, p, schema, path, batch_rows)
        elif fmt == "csv":
            yield from _csv(fs, p, schema, path)
        else:
            yield from _jsonl(fs, p, schema, path)
    except IngestError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise IngestError(f"{path}: cannot be read: {_first_line(e)}") from e


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _parquet(fs: pafs.FileSystem, p: str, schema: Schema, source: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    with fs.open_input_file(p) as f:
        pf = pq.ParquetFile(f)
        present = set(pf.schema_arrow.names)
        for f_ in arrow_schema(schema):
            if f_.name not in present:
                raise IngestError(f"{source}: column {f_.name!r} of the table schema is missing")
        for b in pf.iter_batches(batch_size=batch_rows, use_threads=True):
            yield conform(b, schema, source)


_CSV_COL_RE = re.compile(r"column #(\d+)")


def _csv(fs: pafs.FileSystem, p: str, schema: Schema, source: str) -> Iterator[pa.RecordBatch]:
    for f in schema.all_fields:
        if isinstance(f.type, (MapType, ListType)):
            raise IngestError(f"{source}: CSV cannot carry {_type_name(f.type)} field {f.name!r}; use Parquet or JSON Lines")
    target = arrow_schema(schema)
    types = {f.name: (pa.string() if f.type == pa.binary() else f.type) for f in target}
    with fs.open_input_stream(p) as stream:
        try:
            reader = pacsv.open_csv(stream, read_options=pacsv.ReadOptions(block_size=16 << 20),
                                    convert_options=pacsv.ConvertOptions(column_types=types,
                                                                         strings_can_be_null=False))
            header = reader.schema.names
            for b in reader:
                yield conform(b, schema, source)
        except pa.ArrowInvalid as e:
            msg = _first_line(e)
            m = _CSV_COL_RE.search(msg)
            if m and "header" in locals() and int(m.group(1)) < len(header):
                name = header[int(m.group(1))]
                raise IngestError(f"{source}: column {name!r} does not fit the schema "
                                  f"({_type_name(schema.field(name).type) if name in target.names else 'not in schema'}): {msg}") from e
            raise IngestError(f"{source}: {msg}") from e


def _jsonl(fs: pafs.FileSystem, p: str, schema: Schema, source: str) -> Iterator[pa.RecordBatch]:
    target = arrow_schema(schema)
    nested = any(isinstance(f.type, (MapType, ListType)) for f in schema.all_fields)
    if nested:
        # pyarrow's JSON reader has no map type: parse in Python (slower, exact).
        with fs.open_input_stream(p) as stream:
            rows: list[dict] = []
            for i, line in enumerate(stream.read().decode("utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise IngestError(f"{source}: line {i} is not JSON: {e}") from e
                if len(rows) >= 65536:
                    yield _rows_to_batch(rows, schema, source)
                    rows = []
            if rows:
                yield _rows_to_batch(rows, schema, source)
        return
    explicit = pa.schema([pa.field(f.name, pa.string() if f.type == pa.binary() else f.type) for f in target])
    with fs.open_input_stream(p) as stream:
        try:
            reader = pajson.open_json(stream, parse_options=pajson.ParseOptions(explicit_schema=explicit,
                                                                                unexpected_field_behavior="error"),
                                      read_options=pajson.ReadOptions(block_size=16 << 20))
            for b in reader:
                yield conform(b, schema, source)
        except pa.ArrowInvalid as e:
            msg = _first_line(e)
            for f in target:
                if f"'{f.name}'" in msg or f"\"{f.name}\"" in msg or f" {f.name} " in msg:
                    raise IngestError(f"{source}: column {f.name!r} does not fit the schema: {msg}") from e
            raise IngestError(f"{source}: {msg}") from e


def _rows_to_batch(rows: list[dict], schema: Schema, source: str) -> pa.RecordBatch:
    target = arrow_schema(schema)
    for r in rows:
        extra = set(r) - set(target.names)
        if extra:
            raise IngestError(f"{source}: column {sorted(extra)[0]!r} is not in the table schema")
    cols = []
    for f in target:
        values = [r.get(f.name) for r in rows]
        sf = schema.field(f.name)
        try:
            if sf.type == "ByteArrayType":
                arr = _decode_base64(pa.array(values, pa.string()), source, f.name)
            elif isinstance(sf.type, MapType):
                arr = pa.array([None if v is None else list(v.items()) for v in values], f.type)
            else:
                arr = pa.array(values, f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, AttributeError, TypeError) as e:
            raise IngestError(f"{source}: column {f.name!r} does not fit {_type_name(sf.type)}: {e}") from e
        cols.append(arr)
    return conform(pa.RecordBatch.from_arrays(cols, schema=target), schema, source)
