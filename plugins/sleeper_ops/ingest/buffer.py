"""The write path of the write buffer (DESIGN.md section 3, seed 004): records in, one
durable state-store entry out.

:func:`write_records` checks the records against the table's schema (all or nothing:
bad input raises :class:`~sleeper_ops.errors.IngestError` and nothing is stored),
encodes them as one Arrow IPC stream and stores it with
:meth:`~statestore.store.StateStore.append_buffer`, which returns the entry's sequence
number once it is durable. When the buffer already holds
``sleeper.table.write.buffer.max.records`` records, the write is refused whole with
:class:`~statestore.errors.BufferFullError` ("buffer full, flush pending"); nothing is
ever dropped silently.

A write that fails with StateStoreUnavailableError may or may not have been stored (the
connection was lost around its commit). A write given a ``request_id`` (the client's
idempotency key, :mod:`statestore.client_writes`) may be sent again with the same key:
a repeat within ``sleeper.table.write.idempotency.hours`` stores nothing and returns
the first write's sequence number. A write without a key, sent again, may be stored
twice.

Flushing the buffer into files is :mod:`sleeper_ops.ingest.flush`; queries read it
through :mod:`sleeper_ops.query.buffered`.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import pyarrow as pa

from sleeper_ops.errors import IngestError
from sleeper_ops.io.arrow_schema import arrow_schema
from sleeper_ops.io.inputs import check_readable, conform, read_batches, records_to_batch
from sleeper_ops.io.storage import S3Options
from statestore.catalog import TableInfo
from statestore.client_writes import ClientWrite, check_key, digest_of
from statestore.properties import (
    WRITE_BUFFER_FLUSH_AGE_SECONDS,
    WRITE_BUFFER_FLUSH_RECORDS,
    WRITE_BUFFER_MAX_RECORDS,
    effective_properties,
)
from statestore.roles import WriteBuffer
from statestore.schema import Schema

Records = Union[Sequence[Mapping[str, Any]], pa.Table, pa.RecordBatch]


@dataclass(frozen=True)
class WriteResult:
    """A stored write: its sequence number in the table's buffer and its record count."""

    seq: int
    records: int
    seconds: float


def buffer_limits(table: TableInfo) -> tuple[int, int, int]:
    """The table's (max records, flush records, flush age seconds) of the write buffer."""
    eff = effective_properties(table.properties)
    return (int(eff[WRITE_BUFFER_MAX_RECORDS] or 0), int(eff[WRITE_BUFFER_FLUSH_RECORDS] or 0),
            int(eff[WRITE_BUFFER_FLUSH_AGE_SECONDS] or 0))


def _plain(v: Any) -> Any:
    return base64.b64encode(v).decode("ascii") if isinstance(v, (bytes, bytearray)) else v


def to_batch(records: Records, schema: Schema) -> pa.RecordBatch:
    """``records`` as one batch of the table's Arrow schema, or IngestError naming what
    does not fit (nothing is written). Dicts follow the JSON rules of
    :func:`~sleeper_ops.io.inputs.records_to_batch` (bytes may also be given as bytes)."""
    if isinstance(records, pa.RecordBatch):
        return conform(records, schema, "records", strings_as_base64=False)
    if isinstance(records, pa.Table):
        if records.num_rows == 0:
            return pa.RecordBatch.from_pylist([], schema=arrow_schema(schema))
        return conform(records.combine_chunks().to_batches()[0], schema, "records", strings_as_base64=False)
    if isinstance(records, (str, bytes)) or not isinstance(records, Sequence):
        raise IngestError("write takes a list of dicts, an Arrow table or an Arrow record batch")
    plain = []
    for i, r in enumerate(records):
        if not isinstance(r, Mapping):
            raise IngestError(f"record {i} is not a dict but {type(r).__name__} (nothing written)")
        plain.append({k: _plain(v) for k, v in r.items()})
    try:
        return records_to_batch(plain, schema)
    except UnicodeEncodeError as e:  # lone surrogates cannot be Arrow strings
        raise IngestError(f"records hold a string that is not valid Unicode (nothing written): {e}") from None


def encode(batch: pa.RecordBatch) -> bytes:
    """One Arrow IPC stream holding ``batch``."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


def decode(data: bytes) -> pa.Table:
    """The records of one buffer entry."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def write_records(state_store: WriteBuffer, table: TableInfo, records: Records, *,
                  request_id: Optional[str] = None) -> WriteResult:
    """Store ``records`` in the table's write buffer in one state-store transaction;
    returns once they are durable (see the module docstring). An empty write stores
    nothing and returns sequence number 0. With ``request_id``, a repeat of the same
    records returns the first write's sequence number and stores nothing; the key used
    for other records raises :class:`~statestore.client_writes.IdempotencyKeyReusedError`."""
    start = time.perf_counter()
    batch = to_batch(records, table.schema)
    if batch.num_rows == 0:
        return WriteResult(0, 0, time.perf_counter() - start)
    most, _, _ = buffer_limits(table)
    data = encode(batch)
    write = None if request_id is None else ClientWrite(check_key(request_id), digest_of("write", data))
    seq = state_store.append_buffer(table.table_id, data, batch.num_rows, max_rows=most, client_write=write)
    return WriteResult(seq, batch.num_rows, time.perf_counter() - start)


def read_files(paths: Sequence[str], schema: Schema, s3: S3Options | None = None, *, table: str = "") -> pa.Table:
    """Every record of the files (JSON Lines, CSV, Parquet), checked against the schema
    before any is written: a write of files is all or nothing too. Errors name ``table``
    where the reader does (an empty JSON Lines file)."""
    if not paths:
        raise IngestError("no input files given")
    for p in paths:
        check_readable(p, s3)
    batches: Iterable[pa.RecordBatch] = (b for p in paths for b in read_batches(p, schema, s3, table=table))
    return pa.Table.from_batches(list(batches), schema=arrow_schema(schema))
