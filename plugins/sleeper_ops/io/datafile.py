"""Sorted Parquet data files and their sketch sidecars.

A data file holds records sorted by row keys then sort keys, compressed (zstd by
default), with dictionary encoding off, statistics and the page index written, the
sort order declared in the footer, row groups of at most the table's
``parquet.rowgroup.rows.max`` rows so a point read touches little data, and a Bloom
filter on the first row key field in each row group (:mod:`sleeper_ops.io.bloom`) so a
key lookup skips the row groups without its key. Beside it, a ``.sketches`` object
holds one quantiles sketch per row key field.

Every file is written under a fresh unique key and never changed afterwards.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from sleeper_ops.io import bloom
from sleeper_ops.io.arrow_schema import arrow_schema
from sleeper_ops.io.pandas_free import load_datafusion
from sleeper_ops.io.remote_footer import footer_and_filters
from sleeper_ops.io.storage import ObjectStore
from statestore.catalog import TableInfo
from statestore.properties import (
    INGEST_PARQUET_COMPRESSION_CODEC,
    PARQUET_COMPRESSION_CODEC,
    PARQUET_PAGE_SIZE,
    PARQUET_ROWGROUP_ROWS_MAX,
    PARQUET_ROWKEY_BLOOM_FPP,
)
from statestore.schema import Schema

if TYPE_CHECKING:  # datasketches is imported by writers and readers of sketches only, not by queries
    from sleeper_ops.io.sketches import RowKeySketches


@dataclass(frozen=True)
class ParquetSettings:
    row_group_rows: int = 2048
    page_size: int = 131_072
    compression: str = "zstd"
    #: the Bloom filter's false-positive rate on the first row key field (0: no filter)
    bloom_fpp: float = float(PARQUET_ROWKEY_BLOOM_FPP.default or 0)

    @classmethod
    def of(cls, table: TableInfo) -> ParquetSettings:
        return cls(table.get_int(PARQUET_ROWGROUP_ROWS_MAX),
                   table.get_int(PARQUET_PAGE_SIZE),
                   table.get(PARQUET_COMPRESSION_CODEC) or "zstd",
                   float(table.get(PARQUET_ROWKEY_BLOOM_FPP) or 0))

    @classmethod
    def for_ingest(cls, table: TableInfo) -> ParquetSettings:
        """The settings of the files ingest writes: the table's, in the codec of
        ``sleeper.table.ingest.parquet.compression.codec`` (compaction rewrites them in
        the table's codec, as an LSM tree compresses its first levels lightly)."""
        return replace(cls.of(table), compression=table.get(INGEST_PARQUET_COMPRESSION_CODEC) or "none")


#: codecs DataFusion's writer encodes exactly as pyarrow's, in DataFusion's names (pyarrow's
#: default levels: zstd 1); others (gzip, lz4: different defaults or framing) have no equivalent
_DATAFUSION_CODECS = {"zstd": "zstd(1)", "snappy": "snappy", "none": "uncompressed"}


def datafusion_writer_options(settings: ParquetSettings, schema: Schema) -> Any:
    """DataFusion ``ParquetWriterOptions`` writing what :class:`DataFileWriter` writes
    with ``settings`` for ``schema`` (codec and level, no dictionary, statistics and the
    page index, row groups and pages of the same size, 20,000 rows a page at most, data
    page v1, no stored Arrow schema, the Bloom filter on the first row key field), or
    None when the codec has no exact equivalent there."""
    codec = _DATAFUSION_CODECS.get(settings.compression)
    if codec is None:
        return None
    load_datafusion()
    from datafusion import ParquetColumnOptions, ParquetWriterOptions

    columns = None
    if settings.bloom_fpp > 0:
        columns = {schema.row_key_names[0]: ParquetColumnOptions(
            bloom_filter_enabled=True, bloom_filter_fpp=settings.bloom_fpp, bloom_filter_ndv=settings.row_group_rows)}

    return ParquetWriterOptions(
        data_pagesize_limit=settings.page_size, write_batch_size=1024, writer_version="1.0",
        skip_arrow_metadata=True, compression=codec, dictionary_enabled=False, statistics_enabled="page",
        max_row_group_size=settings.row_group_rows,
        column_index_truncate_length=None, statistics_truncate_length=None, data_page_row_count_limit=20_000,
        allow_single_file_parallelism=True, maximum_parallel_row_group_writers=2,
        maximum_buffered_record_batches_per_stream=2, column_specific_options=columns)


def new_data_key(table_id: str, partition_id: str) -> str:
    """A fresh object key for a data file of ``partition_id``."""
    return f"{table_id}/data/partition_{partition_id}/{ObjectStore.fresh_name('.parquet')}"


def sketch_key(data_key: str) -> str:
    return data_key.rsplit(".parquet", 1)[0] + ".sketches"


@dataclass(frozen=True)
class WrittenFile:
    key: str
    record_count: int
    sketches: RowKeySketches


class DataFileWriter:
    """Writes one sorted data file (batches must arrive in key order) and its sidecar.

    Batches are buffered up to one row group. ``close`` writes the footer and the
    sketches; ``abort`` deletes what was written. With ``sketch_rows=False`` the
    caller supplies ``sketches`` before ``close`` (e.g. merged from the inputs).
    """

    def __init__(self, store: ObjectStore, key: str, schema: Schema, settings: ParquetSettings = ParquetSettings(),
                 *, sketch_rows: bool = True):
        self.store, self.key, self.schema, self.settings = store, key, schema, settings
        from sleeper_ops.io.sketches import RowKeySketches

        self.arrow_schema = arrow_schema(schema)
        self.sketches = RowKeySketches(schema)
        self.sketch_rows = sketch_rows
        self.rows = 0
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._sink = store.open_output(key)
        codec = None if settings.compression == "none" else settings.compression
        self._writer = pq.ParquetWriter(
            self._sink, self.arrow_schema, compression=codec, use_dictionary=False,
            write_statistics=True, write_page_index=True, data_page_size=settings.page_size,
            sorting_columns=[pq.SortingColumn(i) for i in range(len(schema.key_names))],
            store_schema=False,
            bloom_filter_options=bloom.writer_options(schema.row_key_names[0], settings.row_group_rows,
                                                      settings.bloom_fpp))

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        batches = data.to_batches() if isinstance(data, pa.Table) else [data]
        for b in batches:
            if b.num_rows == 0:
                continue
            if b.schema != self.arrow_schema:
                b = pa.RecordBatch.from_arrays([b.column(n) for n in self.arrow_schema.names], schema=self.arrow_schema)
            self._buffer.append(b)
            self._buffered += b.num_rows
            if self.sketch_rows:
                self.sketches.update(b)
            self.rows += b.num_rows
            if self._buffered >= self.settings.row_group_rows:
                self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if not self._buffer:
            return
        table = pa.Table.from_batches(self._buffer, schema=self.arrow_schema)
        n = self.settings.row_group_rows
        full = (table.num_rows // n) * n if not final else table.num_rows
        if full:
            self._writer.write_table(table.slice(0, full), row_group_size=n)
        rest = table.slice(full)
        self._buffer = rest.to_batches() if rest.num_rows else []
        self._buffered = rest.num_rows

    def end_row_group(self) -> None:
        """Write the rows buffered so far as the last row group(s) of their own (a row
        group shorter than the table's size when they do not fill one), so the next rows
        start a new row group: a file shared by several leaves has none that spans two."""
        self._flush(final=True)

    def close(self) -> WrittenFile:
        self._flush(final=True)
        self._writer.close()
        self._sink.close()
        self.store.put(sketch_key(self.key), self.sketches.to_bytes())
        return WrittenFile(self.key, self.rows, self.sketches)

    def abort(self) -> None:
        try:
            self._writer.close()
            self._sink.close()
        except Exception:
            pass
        self.store.delete(self.key)
        self.store.delete(sketch_key(self.key))


def write_data_file(store: ObjectStore, key: str, schema: Schema, data: Iterable[pa.RecordBatch] | pa.Table,
                    settings: ParquetSettings = ParquetSettings()) -> WrittenFile:
    """Write sorted ``data`` to ``key`` with its sidecar; nothing is left behind on failure."""
    w = DataFileWriter(store, key, schema, settings)
    try:
        if isinstance(data, pa.Table):
            w.write(data)
        else:
            for b in data:
                w.write(b)
        return w.close()
    except BaseException:
        w.abort()
        raise


def read_sketches(store: ObjectStore, schema: Schema, data_key: str) -> RowKeySketches:
    from sleeper_ops.io.sketches import RowKeySketches

    return RowKeySketches.from_bytes(schema, store.get(sketch_key(data_key)))


@dataclass(frozen=True)
class RowGroupIndex:
    """One column's min and max per row group of a file sorted on that column (both
    lists non-decreasing), for a binary search of the row groups a key range touches;
    with the column's position and Parquet physical type, for its Bloom filters."""

    mins: tuple[Any, ...]
    maxs: tuple[Any, ...]
    column: int = 0
    physical_type: str = ""

    @classmethod
    def of(cls, md: pq.FileMetaData, column: str) -> Optional[RowGroupIndex]:
        """The index of ``column`` in the footer ``md``; None if a row group has no
        min/max for it or the file is not sorted on it (then every group must be read)."""
        idx = md.schema.to_arrow_schema().get_field_index(column)
        if idx < 0:
            return None
        mins, maxs = [], []
        for i in range(md.num_row_groups):
            st = md.row_group(i).column(idx).statistics
            if st is None or not st.has_min_max:
                return None
            mins.append(st.min)
            maxs.append(st.max)
        if any(a > b for a, b in zip(mins, mins[1:])) or any(a > b for a, b in zip(maxs, maxs[1:])):
            return None
        kind = md.row_group(0).column(idx).physical_type if md.num_row_groups else ""
        return cls(tuple(mins), tuple(maxs), idx, kind)

    def groups(self, lo: Any, hi: Optional[Any]) -> range:
        """The row groups that may hold values in ``[lo, hi)`` (``hi`` None: unbounded)."""
        start = bisect.bisect_left(self.maxs, lo)
        end = len(self.mins) if hi is None else bisect.bisect_left(self.mins, hi)
        return range(start, max(start, end))


_NO_INDEX = object()


class ParquetFileCache:
    """Opened Parquet footers by key, and the row group index of their first row key
    field, built once per file. Safe because data files never change.

    For a remote store (S3) the reader a footer was read through is kept beside it and
    :meth:`reader` hands it out again: S3 answers every fresh open with a HEAD request
    (the object's size), so a warm point read is then one ranged GET. Readers are only
    read at positions (thread-safe); an evicted one is dropped, not closed, as another
    thread may still be reading through it.

    Row groups' Bloom filters (:meth:`may_hold`) are kept too, the most recently used
    up to ``filter_bytes`` bytes of them."""

    def __init__(self, capacity: int = 4096, filter_bytes: int = 64 << 20):
        self.capacity = capacity
        self.filter_bytes = filter_bytes
        self._filters: OrderedDict[tuple[str, int, int], Optional[bytes]] = OrderedDict()
        self._filters_held = 0
        self._lock = threading.Lock()
        self._items: OrderedDict[str, pq.FileMetaData] = OrderedDict()
        self._indexes: dict[str, dict[str, Optional[RowGroupIndex]]] = {}  # by file key, then column
        self._readers: dict[str, pa.NativeFile] = {}  # remote stores only, by file key

    def metadata(self, store: ObjectStore, key: str) -> pq.FileMetaData:
        with self._lock:
            md = self._items.get(key)
            if md is not None:
                self._items.move_to_end(key)
                return md
        f = store.open_input(key)
        filters: dict[tuple[int, int], Optional[bytes]] = {}
        try:
            if store.is_local:
                md = pq.read_metadata(f)
            else:
                md, filters = footer_and_filters(f)
        finally:
            if store.is_local:
                f.close()
        with self._lock:
            self._items[key] = md
            for (group, column), bits in filters.items():
                self._hold_filter((key, group, column), bits)
            if not store.is_local:
                self._readers[key] = f
            while len(self._items) > self.capacity:
                gone, _ = self._items.popitem(last=False)
                self._indexes.pop(gone, None)
                self._readers.pop(gone, None)
        return md

    @contextmanager
    def reader(self, store: ObjectStore, key: str) -> Iterator[pa.NativeFile]:
        """A random-access reader of ``key``: the one kept with its cached footer (remote
        stores: no request to open it), else a fresh one, closed on exit."""
        with self._lock:
            kept = None if store.is_local else self._readers.get(key)
        if kept is not None:
            yield kept
            return
        with store.open_input(key) as f:
            yield f

    def row_group_index(self, store: ObjectStore, key: str, column: str) -> tuple[pq.FileMetaData,
                                                                                  Optional[RowGroupIndex]]:
        """The file's footer and its :class:`RowGroupIndex` on ``column`` (None: none usable)."""
        md = self.metadata(store, key)
        index = self._indexes.get(key, {}).get(column, _NO_INDEX)
        if index is _NO_INDEX:
            index = RowGroupIndex.of(md, column)
            with self._lock:
                if key in self._items:
                    self._indexes.setdefault(key, {})[column] = index
        return md, index  # type: ignore[return-value]

    def may_hold(self, store: ObjectStore, key: str, md: pq.FileMetaData, index: RowGroupIndex,
                 groups: Iterable[int], value: Any) -> list[int]:
        """Those of ``groups`` whose Bloom filter on ``index``'s column may hold ``value``
        (a group with no filter this can read is kept: it may hold anything). From a
        local store a filter not held is read (and kept); from a remote one only the
        filters held are probed (those the footer's read brought, :meth:`metadata`): a
        read of one would be a request of its own, as dear as the row group it may save."""
        h = bloom.hash_of(value, index.physical_type)
        if h is None:
            return list(groups)
        kept = []
        for g in groups:
            bits = self._filter(store, key, md, g, index.column, fetch=store.is_local)
            if bits is None or bloom.may_contain(bits, h):
                kept.append(g)
        return kept

    def _filter(self, store: ObjectStore, key: str, md: pq.FileMetaData, group: int, column: int, *,
                fetch: bool = True) -> Optional[bytes]:
        """Row group ``group``'s Bloom filter bitset on ``column`` (None: none readable),
        from the kept ones or, with ``fetch``, read once (one ranged read: the footer gives
        its place); without ``fetch``, None when it is not held."""
        at = (key, group, column)
        with self._lock:
            if at in self._filters:
                self._filters.move_to_end(at)
                return self._filters[at]
        if not fetch:
            return None
        chunk = md.row_group(group).column(column)
        offset, bits = chunk.bloom_filter_offset, None
        if offset:
            with self.reader(store, key) as f:
                raw = f.read_at(chunk.bloom_filter_length or bloom.HEADER_GUESS, offset)
                head = bloom.parse_header(raw)
                if head is not None:
                    size, start = head
                    bits = raw[start:start + size] if len(raw) >= start + size else f.read_at(size, offset + start)
        with self._lock:
            self._hold_filter(at, bits)
        return bits

    def _hold_filter(self, at: tuple[str, int, int], bits: Optional[bytes]) -> None:
        """Keep the filter ``bits`` of ``at`` (file, group, column), dropping the least
        recently used past ``filter_bytes`` (the caller holds the lock)."""
        if at in self._filters:
            return
        self._filters[at] = bits
        self._filters_held += len(bits or b"") + 100
        while self._filters_held > self.filter_bytes and self._filters:
            _, gone = self._filters.popitem(last=False)
            self._filters_held -= len(gone or b"") + 100


FILE_CACHE: Optional[ParquetFileCache] = ParquetFileCache()
