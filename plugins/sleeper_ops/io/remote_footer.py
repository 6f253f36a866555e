"""A remote data file's footer and the Bloom filters that come in the same read.

On S3 every read is a request. A key lookup probes a row group's Bloom filter
(:mod:`sleeper_ops.io.bloom`) only if the filter is already held, since reading one on
its own costs a round trip, as dear as the row group it might save. The writers put the
filters right before the page index and the footer, at the end of the file, so the one
ranged read that fetches a remote file's footer is made a little longer
(:func:`footer_and_filters`) and brings them too: warm lookups then probe in memory and
read only the files whose filters may hold the key (docs/adr/0022).
"""

from __future__ import annotations

from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq

from sleeper_ops.io import bloom

#: the most of a remote file's end :func:`footer_and_filters` reads in its one request, and
#: the share of the file it reads up to that (a footer alone is read in 64 KiB, Arrow's default)
TAIL_MAX_BYTES = 1 << 20
TAIL_MIN_BYTES = 64 << 10
TAIL_SHARE = 16


def footer_and_filters(f: pa.NativeFile) -> tuple[pq.FileMetaData, dict[tuple[int, int], Optional[bytes]]]:
    """A remote file's footer and the Bloom filters that lie in the same read: one ranged
    read of the file's last ``max(64 KiB, min(1 MiB, size / 16))`` bytes, where the writers
    put the filters, then the page index, then the footer (a footer longer than that is
    read on its own, as Arrow does). Filters are about 2 bytes a row (fpp 0.01), so a
    file of up to about 500,000 rows has them all in it; by (row group, column)."""
    size = f.size()
    want = min(size, max(TAIL_MIN_BYTES, min(TAIL_MAX_BYTES, size // TAIL_SHARE)))
    start = size - want
    tail = f.read_at(want, start)
    try:
        md = pq.read_metadata(pa.BufferReader(tail))
    except (OSError, ValueError):  # the footer is longer than the tail read
        return pq.read_metadata(f), {}
    filters: dict[tuple[int, int], Optional[bytes]] = {}
    for g in range(md.num_row_groups):
        group = md.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            offset, length = chunk.bloom_filter_offset, chunk.bloom_filter_length
            if offset and length and offset >= start and offset + length <= size:
                raw = tail[offset - start:offset - start + length]
                head = bloom.parse_header(raw)
                filters[(g, c)] = raw[head[1]:head[1] + head[0]] if head and len(raw) >= sum(head) else None
    return md, filters
