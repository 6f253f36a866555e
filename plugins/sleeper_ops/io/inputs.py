"""Reading user files to ingest: Parquet, CSV and JSON Lines, local or on S3.

Every batch is conformed to the table schema: a column missing, extra, of a type
that cannot be read as the schema's, or null in a key field is refused with an
:class:`IngestError` naming the file and the column. In CSV and JSON Lines, bytes
fields are base64 strings; JSON Lines carries maps as objects and lists as arrays.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import os
import re
from typing import Any, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pyarrow.parquet as pq

from sleeper_ops.errors import IngestError
from sleeper_ops.io.arrow_schema import arrow_schema
from sleeper_ops.io.codec import json_value
from sleeper_ops.io.storage import S3Options
from statestore.schema import ListType, MapType, Schema, type_name

#: the most rows a read of an input holds at once (one batch)
BATCH_ROWS = 262_144

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
        return (s3 or S3Options()).filesystem(), path[len("s3://"):]
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


def _kind(t: pa.DataType) -> object:
    """What a column type holds, ignoring width and encoding: the unit of type compatibility."""
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
            or pa.types.is_fixed_size_binary(t)):
        return "binary"
    if pa.types.is_map(t):
        return ("map", _kind(t.key_type), _kind(t.item_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return ("list", _kind(t.value_type))
    return str(t)


def conform(batch: pa.RecordBatch, schema: Schema, source: str, *, strings_as_base64: bool = True) -> pa.RecordBatch:
    """``batch`` with exactly the schema's columns and types, or IngestError.

    A column is read as the schema's type only if it holds the same kind of values
    (integers of any width for IntType and LongType, range-checked; strings for
    StringType; bytes for ByteArrayType; maps and lists of those): a string column
    is never parsed as numbers, nor numbers formatted as strings. With
    ``strings_as_base64`` (text formats), a string column of a ByteArrayType field
    holds base64.
    """
    target = arrow_schema(schema)
    check_columns(batch.schema.names, schema, source)
    cols = [conform_column(batch.column(f.name), f, schema, source, strings_as_base64=strings_as_base64)
            for f in target]
    return pa.RecordBatch.from_arrays(cols, schema=target)


def check_columns(names: Sequence[str], schema: Schema, source: str) -> None:
    """IngestError naming the first of the schema's columns missing from ``names``, or
    else the first of ``names`` not in the schema."""
    target = arrow_schema(schema).names
    for n in target:
        if n not in names:
            raise IngestError(f"{source}: column {n!r} of the table schema is missing")
    for n in names:
        if n not in target:
            raise IngestError(f"{source}: column {n!r} is not in the table schema")


def unreadable(path: str, e: BaseException) -> IngestError:
    """The refusal of an input that cannot be read (``e``: the reader's error), to raise."""
    return IngestError(f"{path}: cannot be read: {_first_line(e)}")


def conform_column(c: pa.Array | pa.ChunkedArray, f: pa.Field, schema: Schema, source: str, *,
                   strings_as_base64: bool = True) -> Any:
    """Column ``c`` as the type of the schema's field ``f`` (see :func:`conform`), or IngestError."""
    if c.type != f.type:
        sf = schema.field(f.name)
        if pa.types.is_dictionary(c.type):
            c = c.dictionary_decode() if isinstance(c, pa.Array) else pa.chunked_array(
                [chunk.dictionary_decode() for chunk in c.chunks], c.type.value_type)
        if (strings_as_base64 and sf.type == "ByteArrayType"
                and (pa.types.is_string(c.type) or pa.types.is_large_string(c.type))):
            c = _decode_base64(c, source, f.name)
        elif _kind(c.type) not in (_kind(f.type), "null"):
            raise IngestError(f"{source}: column {f.name!r} holds {c.type}, which cannot be read as "
                              f"{type_name(sf.type)}")
        if c.type != f.type:
            try:
                c = c.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise IngestError(f"{source}: column {f.name!r} holds {c.type}, which cannot be read as "
                                  f"{type_name(sf.type)}: {_first_line(e)}") from e
    if not f.nullable and c.null_count:
        raise IngestError(f"{source}: key column {f.name!r} has {c.null_count} null values")
    return c


def _decode_base64(col: pa.Array, source: str, name: str) -> pa.Array:
    try:
        return pa.array([None if v is None else base64.b64decode(v, validate=True) for v in col.to_pylist()],
                        pa.binary())
    except (binascii.Error, ValueError) as e:
        raise IngestError(f"{source}: column {name!r} is ByteArrayType and must hold base64 strings: {e}") from e


def read_batches(path: str, schema: Schema, s3: Optional[S3Options] = None,
                 batch_rows: int = BATCH_ROWS, *, table: str = "") -> Iterator[pa.RecordBatch]:
    """Yield the records of one input file as conformed batches of at most ``batch_rows`` rows.

    A JSON Lines file with no record (empty, or blank lines only) is refused with an
    IngestError naming the file and ``table`` (the table it was given to): it is taken
    for a mistake (a file not yet written, the wrong file), not read as no records."""
    fmt = detect_format(path)
    fs, p = resolve(path, s3)
    try:
        if fmt == "parquet":
            batches = _parquet(fs, p, schema, path, batch_rows)
        elif fmt == "csv":
            batches = _csv(fs, p, schema, path)
        else:
            batches = _not_empty(_jsonl(fs, p, schema, path), path, table)
        for b in batches:
            if b.num_rows <= batch_rows:
                yield b
            else:  # zero-copy slices
                for start in range(0, b.num_rows, batch_rows):
                    yield b.slice(start, batch_rows)
    except IngestError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise unreadable(path, e) from e


def _not_empty(batches: Iterator[pa.RecordBatch], path: str, table: str) -> Iterator[pa.RecordBatch]:
    """``batches`` of a JSON Lines file, refused when the file holds no record."""
    refusal = (f"table {table!r}: " if table else "") + (f"{path} is an empty JSON Lines file (no records); "
                                                          "nothing was stored")
    try:
        first = next(batches, None)
    except IngestError as e:
        if str(e).endswith("Empty JSON stream"):  # pyarrow's message for no JSON value at all
            raise IngestError(refusal) from e
        raise
    if first is None:
        raise IngestError(refusal)
    yield first
    yield from batches


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _parquet(fs: pafs.FileSystem, p: str, schema: Schema, source: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    with fs.open_input_file(p) as f:
        pf = pq.ParquetFile(f)
        present = set(pf.schema_arrow.names)
        for f_ in arrow_schema(schema):
            if f_.name not in present:
                raise IngestError(f"{source}: column {f_.name!r} of the table schema is missing")
        # one reader per row group: a reader over the whole file keeps every row group's
        # buffers it has read until it is exhausted (apache/arrow#39808), so an ingest's
        # memory grew with its input (about 37 MB per million rows here) instead of its chunk
        for group in range(pf.metadata.num_row_groups):
            for b in pf.iter_batches(batch_size=batch_rows, row_groups=[group], use_threads=True):
                yield conform(b, schema, source, strings_as_base64=False)


_CSV_COL_RE = re.compile(r"column #(\d+)")


def _csv(fs: pafs.FileSystem, p: str, schema: Schema, source: str) -> Iterator[pa.RecordBatch]:
    for f in schema.all_fields:
        if isinstance(f.type, (MapType, ListType)):
            raise IngestError(
                f"{source}: CSV cannot carry {type_name(f.type)} field {f.name!r}; use Parquet or JSON Lines")
    target = arrow_schema(schema)
    types = {f.name: (pa.string() if f.type == pa.binary() else f.type) for f in target}
    with fs.open_input_stream(p) as stream:
        try:
            reader = pacsv.open_csv(stream, read_options=pacsv.ReadOptions(block_size=16 << 20),
                                    convert_options=pacsv.ConvertOptions(column_types=types,
                                                                         strings_can_be_null=False))
            for b in reader:
                yield conform(b, schema, source)
        except pa.ArrowInvalid as e:
            msg = _first_line(e)
            m = _CSV_COL_RE.search(msg)
            header = _csv_header(fs, p) if m else []
            if m and int(m.group(1)) < len(header):
                name = header[int(m.group(1))]
                expected = type_name(schema.field(name).type) if name in target.names else "not in schema"
                raise IngestError(f"{source}: column {name!r} does not fit the schema ({expected}): {msg}") from e
            raise IngestError(f"{source}: {msg}") from e


def _csv_header(fs: pafs.FileSystem, p: str) -> list[str]:
    """The column names of a CSV file's header line (empty if it cannot be read)."""
    try:
        with fs.open_input_stream(p) as stream:
            head = stream.read(1 << 20).decode("utf-8", errors="replace")
        return next(csv.reader(io.StringIO(head)), [])
    except (OSError, csv.Error):
        return []


def _jsonl(fs: pafs.FileSystem, p: str, schema: Schema, source: str) -> Iterator[pa.RecordBatch]:
    target = arrow_schema(schema)
    nested = any(isinstance(f.type, (MapType, ListType)) for f in schema.all_fields)
    if nested:
        # pyarrow's JSON reader has no map type: parse in Python (slower, exact).
        rows: list[tuple[int, Any]] = []
        for i, row in _json_lines(fs, p, source):
            rows.append((i, row))
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
            text_columns = [f.name for f in explicit if pa.types.is_string(f.type)]
            for b in reader:
                _check_utf8(b, text_columns, source)
                yield conform(b, schema, source)
        except pa.ArrowInvalid as e:
            msg = _first_line(e)
            # Arrow's messages rarely name the field: find the first bad value in Python.
            found = _diagnose_jsonl(fs, p, schema, source)
            if found is not None:
                raise found from e
            m = _JSON_COL_RE.search(msg)
            if m and m.group(1) in target.names:
                raise IngestError(f"{source}: column {m.group(1)!r} does not fit the schema: {msg}") from e
            raise IngestError(f"{source}: {msg}") from e


def _check_utf8(batch: pa.RecordBatch, names: list[str], source: str) -> None:
    """Arrow's JSON reader does not check UTF-8: refuse a string column that is not valid UTF-8."""
    for n in names:
        try:
            batch.column(n).validate(full=True)
        except pa.ArrowInvalid as e:
            raise IngestError(f"{source}: column {n!r} is not valid UTF-8 text: {_first_line(e)}") from e


_JSON_COL_RE = re.compile(r"Column\(/([^)/]+)\)")


def _json_lines(fs: pafs.FileSystem, p: str, source: str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON object) of each non-blank line, streaming."""
    with fs.open_input_stream(p) as stream:
        text = io.TextIOWrapper(stream, encoding="utf-8")
        try:
            for i, line in enumerate(text, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise IngestError(f"{source}: line {i} is not JSON: {e}") from e
                if not isinstance(row, dict):
                    raise IngestError(f"{source}: line {i} is not a JSON object")
                yield i, row
        except UnicodeDecodeError as e:
            raise IngestError(f"{source}: is not UTF-8 text: {e}") from e
        finally:
            text.detach()


def records_to_batch(records: list[dict[str, Any]], schema: Schema) -> pa.RecordBatch:
    """JSON records as one batch of the table's Arrow schema, or IngestError naming the
    first record and field that does not fit (the CLI's JSON Lines rules)."""
    fields = schema.all_fields
    names = set(schema.field_names)
    key_names = set(schema.key_names)
    columns: list[list[Any]] = [[] for _ in fields]
    for i, rec in enumerate(records):
        for k in rec:
            if k not in names:
                raise IngestError(f"record {i}: field {k!r} is not in the table schema")
        for j, f in enumerate(fields):
            v = rec.get(f.name)
            if v is None and f.name in key_names:
                raise IngestError(f"record {i}: key field {f.name!r} is missing or null")
            try:
                columns[j].append(json_value(f.type, v))
            except ValueError as e:
                raise IngestError(f"record {i}: field {f.name!r} does not fit {type_name(f.type)}: {e}") from None
    target = arrow_schema(schema)
    batch = pa.RecordBatch.from_arrays([pa.array(c, t.type) for c, t in zip(columns, target)], schema=target)
    return conform(batch, schema, "records")


def _check_row(i: int, row: dict, schema: Schema, source: str) -> list[Any]:
    """The values of one JSON Lines row in schema order, or IngestError naming line and column."""
    names = schema.field_names
    for k in row:
        if k not in names:
            raise IngestError(f"{source}: line {i}: column {k!r} is not in the table schema")
    out = []
    for f in schema.all_fields:
        try:
            out.append(json_value(f.type, row.get(f.name)))
        except ValueError as e:
            raise IngestError(f"{source}: line {i}: column {f.name!r} does not fit {type_name(f.type)}: {e}") from None
    return out


def _diagnose_jsonl(fs: pafs.FileSystem, p: str, schema: Schema, source: str) -> Optional[IngestError]:
    """The first error in a JSON Lines file, found in Python; None if none is found."""
    try:
        for i, row in _json_lines(fs, p, source):
            _check_row(i, row, schema, source)
    except IngestError as e:
        return e
    except OSError:
        return None
    return None


def _rows_to_batch(rows: list[tuple[int, Any]], schema: Schema, source: str) -> pa.RecordBatch:
    target = arrow_schema(schema)
    values = [_check_row(i, row, schema, source) for i, row in rows]
    cols = []
    for j, f in enumerate(target):
        try:
            cols.append(pa.array([v[j] for v in values], f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise IngestError(f"{source}: column {f.name!r} does not fit "
                              f"{type_name(schema.field(f.name).type)}: {_first_line(e)}") from e
    return conform(pa.RecordBatch.from_arrays(cols, schema=target), schema, source)
