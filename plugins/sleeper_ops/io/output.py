"""Writing query results as JSON Lines, CSV or Parquet.

JSON Lines and CSV write bytes as base64 and maps as objects (CSV cells hold the
JSON of maps and lists); Parquet keeps every schema type exactly. Values JSON has no
type for (timestamps and dates, e.g. from SQL, and decimals) are written to JSON
Lines as strings, times in ISO 8601.
"""

from __future__ import annotations

import base64
import io
import json
import sys
from typing import BinaryIO, Optional

import pyarrow as pa

from sleeper_ops.io.codec import jsonable, row_dicts

FORMATS = ("jsonl", "csv", "parquet")


def write_results(table: pa.Table, fmt: str, output: Optional[str] = None) -> None:
    """Write ``table`` in ``fmt`` to the file ``output``, or to stdout (not for parquet)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    map_fields = {f.name for f in table.schema if pa.types.is_map(f.type)}
    if fmt == "parquet":
        if output is None:
            raise ValueError("--format parquet needs --output FILE")
        import pyarrow.parquet as pq

        pq.write_table(table, output)
        return
    stream: BinaryIO
    close = False
    if output is None:
        stream = sys.stdout.buffer
    else:
        stream = open(output, "wb")
        close = True
    try:
        if fmt == "jsonl":
            for d in row_dicts(table, map_fields):
                stream.write(json.dumps(d, ensure_ascii=False, default=_as_text).encode() + b"\n")
        else:
            cols = {}
            for f in table.schema:
                c = table.column(f.name)
                if pa.types.is_binary(f.type):
                    cols[f.name] = pa.array([None if v is None else base64.b64encode(v).decode()
                                             for v in c.to_pylist()])
                elif pa.types.is_map(f.type) or pa.types.is_list(f.type):
                    cols[f.name] = pa.array([None if v is None else json.dumps(
                        {str(jsonable(a)): jsonable(b) for a, b in v} if pa.types.is_map(f.type) else jsonable(v))
                        for v in c.to_pylist()], pa.string())
                else:
                    cols[f.name] = c
            buf = io.BytesIO()
            import pyarrow.csv as pacsv

            pacsv.write_csv(pa.table(cols), buf)
            stream.write(buf.getvalue())
    finally:
        if close:
            stream.close()
        else:
            stream.flush()


def _as_text(v: object) -> str:
    """A value JSON has no type for, as text: ISO 8601 for dates and times."""
    iso = getattr(v, "isoformat", None)
    return str(iso()) if callable(iso) else str(v)
