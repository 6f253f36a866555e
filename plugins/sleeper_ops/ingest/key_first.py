"""Parquet inputs that fit one ingest chunk, read key columns first.

A chunk's sort needs only its key columns (row keys, then sort keys for ties), so when
every input is a Parquet file and together they fit one chunk (their footers say how
many rows and uncompressed bytes), the key columns are read first and the sort runs on
them while another thread reads the remaining columns: the read of the values
overlaps the sort instead of preceding it. The rows, their order and every refusal are
those of the streaming read (:func:`sleeper_ops.io.inputs.read_batches`): the same
columns, conformed by the same rules, files in the order given, each file's rows in
its own order; a column missing or not in the schema is refused from the footer,
before anything is read, with the same message.

Memory is bounded as the streaming read's is: the path is taken only when the files'
rows and uncompressed bytes are within the chunk's limits, and the read gives up (the
caller then streams the files) as soon as the columns it has decoded exceed the chunk's
bytes, which dictionary-encoded columns can while their Parquet pages stay small.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from sleeper_ops.io.arrow_schema import arrow_schema
from sleeper_ops.io.inputs import BATCH_ROWS, check_columns, conform_column, detect_format, resolve, unreadable
from sleeper_ops.io.storage import S3Options
from statestore.schema import Schema

#: what the caller does with the key columns while the other columns are read: its
#: answer comes back with the whole table
Sorter = Callable[[pa.Table], object]


@dataclass(frozen=True)
class ParquetChunk:
    """Parquet inputs that together fit one chunk, with their footers (read once, for
    the chunk's size and every read of the file's columns) and row count."""

    paths: tuple[str, ...]
    footers: tuple[pq.FileMetaData, ...]
    rows: int
    max_bytes: int

    @classmethod
    def of(cls, paths: Sequence[str], schema: Schema, s3: Optional[S3Options], *, max_rows: int,
           max_bytes: int) -> Optional[ParquetChunk]:
        """The chunk of ``paths``, or None when one is not Parquet or together they
        exceed ``max_rows`` or ``max_bytes`` uncompressed (the streaming read applies).
        A file whose columns are not the schema's is refused here (IngestError)."""
        if any(detect_format(p) != "parquet" for p in paths):
            return None
        footers = []
        rows = size = 0
        for p in paths:
            md, present = _footer(p, s3)
            check_columns(present, schema, p)
            footers.append(md)
            rows += md.num_rows
            size += sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
            if rows > max_rows or size > max_bytes:
                return None
        return cls(tuple(paths), tuple(footers), rows, max_bytes)

    def read(self, schema: Schema, s3: Optional[S3Options], sort: Sorter) -> Optional[tuple[pa.Table, object]]:
        """Every row as one table of the schema's columns, and ``sort``'s answer for the
        key columns, which it was given while the other columns were being read; None
        when the decoded columns exceed the chunk's bytes (nothing is kept)."""
        keys = schema.key_names
        others = [f.name for f in schema.all_fields if f.name not in keys]
        budget = _Budget(self.max_bytes)
        try:
            with contextlib.ExitStack() as stack:
                rest = None
                if others:
                    pool = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="ingest-read"))
                    rest = pool.submit(self._columns, schema, s3, others, budget)
                key_table = self._columns(schema, s3, keys, budget)
                answer = sort(key_table)
                values = rest.result() if rest is not None else None
        except _OverBudget:
            return None
        target = arrow_schema(schema)
        columns = [key_table.column(f.name) if f.name in keys else values.column(f.name)  # type: ignore[union-attr]
                   for f in target]
        return pa.Table.from_arrays(columns, schema=target), answer

    def _columns(self, schema: Schema, s3: Optional[S3Options], names: list[str], budget: _Budget) -> pa.Table:
        """Columns ``names`` of every file, conformed, files in order, as one chunk each;
        _OverBudget once the decoded bytes of every reader pass the budget."""
        fields = [arrow_schema(schema).field(n) for n in names]
        parts = []
        for p, footer in zip(self.paths, self.footers):
            fs, path = resolve(p, s3)
            try:
                with fs.open_input_file(path) as source:
                    for t in _pieces(pq.ParquetFile(source, metadata=footer), names):
                        budget.spend(t.nbytes)
                        cols = [conform_column(t.column(f.name), f, schema, p, strings_as_base64=False)
                                for f in fields]
                        parts.append(pa.Table.from_arrays(cols, schema=pa.schema(fields)))
            except (OSError, pa.ArrowException) as e:
                raise unreadable(p, e) from e
        return pa.concat_tables(parts).combine_chunks() if parts else pa.schema(fields).empty_table()


def _pieces(pf: pq.ParquetFile, names: list[str]) -> Iterator[pa.Table]:
    """Columns ``names`` of ``pf``, a row group at a time, or in batches of
    :data:`~sleeper_ops.io.inputs.BATCH_ROWS` rows for a larger row group (the streaming
    read's most), so the budget is checked at least that often."""
    for group in range(pf.metadata.num_row_groups):
        if pf.metadata.row_group(group).num_rows <= BATCH_ROWS:
            yield pf.read_row_group(group, columns=names, use_threads=True)
            continue
        for b in pf.iter_batches(batch_size=BATCH_ROWS, row_groups=[group], columns=names, use_threads=True):
            yield pa.Table.from_batches([b])


class _OverBudget(Exception):
    """The decoded columns passed the chunk's bytes."""


class _Budget:
    """Decoded bytes shared by the readers of one chunk."""

    def __init__(self, limit: int) -> None:
        self.limit, self.spent = limit, 0
        self._lock = threading.Lock()

    def spend(self, nbytes: int) -> None:
        with self._lock:
            self.spent += nbytes
            if self.spent > self.limit:
                raise _OverBudget()


def _footer(path: str, s3: Optional[S3Options]) -> tuple[pq.FileMetaData, list[str]]:
    """The file's footer and its columns' names (IngestError if it cannot be read)."""
    fs, p = resolve(path, s3)
    try:
        with fs.open_input_file(p) as f:
            pf = pq.ParquetFile(f)
            return pf.metadata, pf.schema_arrow.names
    except (OSError, pa.ArrowException) as e:
        raise unreadable(path, e) from e
