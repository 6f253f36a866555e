"""Reading any object that may hold records, for the proof of erasure: Parquet (data
files, exports, attempts' outputs), Arrow IPC files and streams (bulk import's scratch
runs, buffer entries and their blobs) and sketch sidecars (sampled key values).

:func:`matching_rows` returns the rows of an object matching a probe, or raises
:class:`CannotTell` for an object in none of these formats or cut short: the report
lists it as "cannot tell" and never assumes it clean.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from sleeper_ops.engine.deletes import key_bounds, matches
from sleeper_ops.io.sketches import RowKeySketches
from sleeper_ops.io.storage import ObjectStore
from statestore.deletes import Tombstone
from statestore.region import Region
from statestore.schema import Schema

PARQUET_MAGIC = b"PAR1"
ARROW_FILE_MAGIC = b"ARROW1"
SKETCH_SUFFIX = ".sketches"


class CannotTell(Exception):
    """The object cannot be decoded (unknown format, cut short, unreadable)."""


def after(v: Any) -> Any:
    """An exclusive upper bound just above ``v`` (for :meth:`Range.overlaps`)."""
    if isinstance(v, int):
        return v + 1
    if isinstance(v, str):
        return v + "\x00"
    if isinstance(v, bytes):
        return v + b"\x00"
    return None


def _overlaps(regions: Sequence[Region], bounds: Optional[tuple[Any, Any]]) -> bool:
    return bounds is None or any(r.ranges[0].overlaps(bounds[0], after(bounds[1])) for r in regions)


def parquet_hits(objects: ObjectStore, key: str, first: str, regions: Sequence[Region],
                 probe: Tombstone) -> Optional[pa.Table]:
    """The matching rows of a Parquet object, or None when its statistics rule it out
    (the object is not read past its footer)."""
    with objects.open_input(key) as f:
        pf = pq.ParquetFile(f, pre_buffer=False)
        if not _overlaps(regions, key_bounds(pf.metadata, first)):
            return None
        rows = pf.read()
    return rows.filter(matches(rows, probe)) if rows.num_rows else rows


def ipc_hits(data: bytes, probe: Tombstone) -> pa.Table:
    """The matching rows of Arrow IPC bytes (file or stream format)."""
    if data[:6] == ARROW_FILE_MAGIC:
        rows = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    else:
        rows = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    return rows.filter(matches(rows, probe)) if rows.num_rows else rows


def sketch_hits(data: bytes, schema: Schema, regions: Sequence[Region]) -> int:
    """How many key values a sidecar's sketch of the first row key field retained that
    lie in one of ``regions`` (on that field): a sketch holds sampled key values, not
    records, so a predicate cannot be applied to them and every value in a region counts."""
    first = schema.row_key_fields[0]
    sketch = RowKeySketches.from_bytes(schema, data).fields[first.name]
    hits = 0
    for value, _weight in sketch.sketch:
        v = sketch._decode(value)
        if any(r.ranges[0].contains(v) for r in regions):
            hits += 1
    return hits


def matching_rows(objects: ObjectStore, key: str, schema: Schema, regions: Sequence[Region],
                  probe: Tombstone) -> int:
    """How many rows (or, for a sidecar, sampled key values) of object ``key`` match;
    raises :class:`CannotTell` when it cannot be decoded."""
    try:
        if key.endswith(SKETCH_SUFFIX):
            return sketch_hits(objects.get(key), schema, regions)
        with objects.open_input(key) as f:
            head = f.read(8)
        if head[:4] == PARQUET_MAGIC:
            hit = parquet_hits(objects, key, schema.row_key_names[0], regions, probe)
            return 0 if hit is None else int(hit.num_rows)
        data = objects.get(key)
        if data[:6] == ARROW_FILE_MAGIC or data[:4] == b"\xff\xff\xff\xff":
            return int(ipc_hits(data, probe).num_rows)
    except CannotTell:
        raise
    except Exception as e:  # a file cut short, an unknown codec, a field of another schema
        raise CannotTell(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    raise CannotTell(f"not Parquet, Arrow IPC or a sketch sidecar (starts {head[:8]!r})")


def blob_hits(data: bytes, probe: Tombstone) -> int:
    """How many rows of a buffer blob (Arrow IPC stream, possibly zlib-compressed) match;
    raises :class:`CannotTell` when it cannot be decoded."""
    import zlib

    try:
        if data[:4] != b"\xff\xff\xff\xff" and data[:6] != ARROW_FILE_MAGIC:
            data = zlib.decompress(data)
        return int(ipc_hits(data, probe).num_rows)
    except Exception as e:
        raise CannotTell(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None


__all__ = ["CannotTell", "after", "blob_hits", "matching_rows", "parquet_hits", "ipc_hits", "sketch_hits"]
