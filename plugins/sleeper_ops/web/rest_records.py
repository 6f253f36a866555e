"""The body of ``GET /tables/{t}/records``, streamed: JSON produced a batch at a time.

The body has the documented shape ``{"records": [...], "count": N, "truncated": B}``
(:class:`~sleeper_ops.web.rest_models.RecordsOut`), written in that order: the records
as the query yields them, then ``count`` and ``truncated``, which are known only at the
end. The server holds one batch of records and its JSON at a time, never the result.

Records are as :func:`sleeper_ops.io.codec.records_json` makes them (bytes as base64,
maps as objects), built a column at a time.

The status and headers go out before the first record: the route reads the first batch
before it answers, so a query that fails at once still gets its error status. A failure
after that (a file that cannot be read half way) ends the body early; it is then not
valid JSON, which a client notices.
"""

from __future__ import annotations

import base64
import json
from itertools import chain
from typing import Any, AsyncIterator, Generator, Iterator, Optional

import anyio
import pyarrow as pa
from starlette.concurrency import iterate_in_threadpool

from sleeper_ops.io.codec import jsonable


def _column_values(col: pa.Array) -> list[Any]:
    t = col.type
    values = col.to_pylist()
    if pa.types.is_string(t) or pa.types.is_integer(t):
        return values
    if pa.types.is_binary(t):
        return [None if v is None else base64.b64encode(v).decode("ascii") for v in values]
    if pa.types.is_map(t):
        return [None if v is None else {str(jsonable(k)): jsonable(x) for k, x in v} for v in values]
    return [jsonable(v) for v in values]


def records_json_text(batch: pa.RecordBatch) -> str:
    """The batch's records as JSON objects separated by commas (no brackets)."""
    names = batch.schema.names
    columns = [_column_values(batch.column(i)) for i in range(batch.num_columns)]
    text = json.dumps([dict(zip(names, row)) for row in zip(*columns)], separators=(",", ":"))
    return text[1:-1]


def records_body(first: Optional[pa.RecordBatch], rest: Generator[pa.RecordBatch, None, None],
                 limit: int) -> Generator[bytes, None, None]:
    """The body's chunks: at most ``limit`` records of ``first`` then ``rest``;
    ``truncated`` when there were more. Closes ``rest`` when done or closed."""
    count, truncated, sep = 0, False, ""
    try:
        yield b'{"records":['
        batches: Iterator[pa.RecordBatch] = chain([first], rest) if first is not None else iter(())
        for b in batches:
            if count + b.num_rows > limit:
                b, truncated = b.slice(0, limit - count), True
            if b.num_rows:
                yield (sep + records_json_text(b)).encode()
                sep = ","
                count += b.num_rows
            if truncated:
                break
        yield f'],"count":{count},"truncated":{"true" if truncated else "false"}}}'.encode()
    finally:
        rest.close()


def prepended(batch: pa.RecordBatch, rest: Generator[pa.RecordBatch, None, None]
              ) -> Generator[pa.RecordBatch, None, None]:
    """``batch`` then the batches of ``rest``; closing this closes ``rest``."""
    try:
        yield batch
        yield from rest
    finally:
        rest.close()


async def in_threads(chunks: Generator[bytes, None, None]) -> AsyncIterator[bytes]:
    """``chunks``, each made in a worker thread; closed (in a worker thread too) however
    the response ends, a client gone away included, so its files are closed at once."""
    try:
        async for chunk in iterate_in_threadpool(chunks):
            yield chunk
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(chunks.close)
