"""Quantiles sketches of row key fields (Apache DataSketches KLL), one per field.

Each data file has a sidecar holding one sketch per row key field. Sketches merge
across files, so partition splitting finds the median of a partition from its
files' sidecars without reading data. Ints use the native int sketch, longs the
doubles sketch (vectorised; the median is rounded back to an integer), strings the
items sketch, and bytes the items sketch over their hex form (hex preserves the
unsigned lexicographic order of bytes).

Strings and bytes are sketched without a Python call per value
(:func:`items_sketch_of`): a KLL sketch depends on its values only through their
order, so the values are sorted in Arrow, a doubles sketch is fed their ranks
``0 .. n-1`` (vectorised), and its serialized form, whose layout is the items
sketch's, gets back the value at each rank it retained. The result is a KLL items
sketch of exactly those values (``n`` exact, the same error bounds), and merges
with any other. Values gather per field and are sketched a run at a time
(:data:`RUN_ROWS`), so small batches do not each pay for a sketch.
"""

from __future__ import annotations

import base64
import json
import struct
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import datasketches as ds

from sleeper_ops.io.arrow_numpy import indices, to_numpy
from statestore.schema import Schema

K = 200


class Utf8SerDe(ds.PyObjectSerDe):
    """Length-prefixed UTF-8 strings (datasketches' own string serde is not UTF-8 safe)."""

    def get_size(self, item: str) -> int:
        return 4 + len(item.encode("utf-8"))

    def to_bytes(self, item: str) -> bytes:
        b = item.encode("utf-8")
        return struct.pack("<i", len(b)) + b

    def from_bytes(self, data: bytes, offset: int) -> tuple[str, int]:
        n = struct.unpack_from("<i", data, offset)[0]
        return bytes(data[offset + 4:offset + 4 + n]).decode("utf-8"), 4 + n


#: values of a string or bytes field gathered before they are sketched together
RUN_ROWS = 262_144


def _utf8_arrow(values: pa.Array) -> bytes:
    """The string ``values`` as :class:`Utf8SerDe` writes them (a little-endian int32
    length before each value's UTF-8 bytes), assembled in numpy."""
    if pa.types.is_large_string(values.type):
        values = values.cast(pa.string())
    n = len(values)
    if n == 0:
        return b""
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=n + 1, offset=values.offset * 4)
    lengths = np.diff(offsets).astype("<i4")
    data = np.frombuffer(values.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    starts = np.arange(n) * 4 + (offsets[:-1] - offsets[0])  # where each item's length goes
    out = np.empty(4 * n + len(data), dtype=np.uint8)
    out[(starts[:, None] + np.arange(4)).ravel()] = lengths.view(np.uint8)
    owner = np.repeat(np.arange(n), lengths)  # the item each data byte belongs to
    out[np.arange(len(data)) + 4 * (owner + 1)] = data
    return out.tobytes()


def _is_sorted(values: pa.Array) -> bool:
    return len(values) < 2 or not pc.any(pc.less(values[1:], values[:-1])).as_py()


def items_sketch_bytes(values: pa.Array, hex_bytes: bool = False) -> bytes:
    """A serialized KLL items sketch (K = :data:`K`, :class:`Utf8SerDe`) of the
    non-empty string or binary ``values`` (binary as their hex strings when
    ``hex_bytes``), built with no Python call per value (the module docstring says how)."""
    if not _is_sorted(values):
        values = values.take(pc.sort_indices(values))
    ranks = ds.kll_doubles_sketch(K)
    ranks.update(np.arange(len(values), dtype=np.float64))
    raw = ranks.serialize()
    # header: 8 bytes (one value: preamble 2); else also n, min_k, num_levels, a spare
    # byte and a uint32 per level; then min, max and the retained values (doubles)
    header = 8 if raw[0] == 2 else 20 + 4 * raw[18]
    at = np.frombuffer(raw, dtype="<f8", offset=header).astype(np.int64)
    picked = values.take(indices(at))
    if hex_bytes:
        picked = pa.array([v.hex() for v in picked.to_pylist()], pa.string())
    return raw[:header] + _utf8_arrow(picked)


class FieldSketch:
    """A mergeable quantiles sketch of one key field's values.

    String and bytes values gather until :data:`RUN_ROWS` or until the sketch is read;
    a sketch built from one run and never merged is kept serialized, so writing it
    costs no conversion."""

    def __init__(self, key_type: str, sketch: Any = None):
        self.key_type = key_type
        self._pending: list[pa.Array] = []  # string/bytes values not yet in the sketch
        self._pending_rows = 0
        self._serialized: Optional[bytes] = None  # the whole sketch, serialized, when _sketch is None
        self._sketch: Any
        if sketch is not None:
            self._sketch = sketch
        elif key_type == "IntType":
            self._sketch = ds.kll_ints_sketch(K)
        elif key_type == "LongType":
            self._sketch = ds.kll_doubles_sketch(K)
        else:
            self._sketch = None

    def _settle(self) -> None:
        """Sketch the gathered values."""
        if not self._pending:
            return
        run = items_sketch_bytes(pa.concat_arrays(self._pending), hex_bytes=self.key_type == "ByteArrayType")
        self._pending, self._pending_rows = [], 0
        if self._sketch is None and self._serialized is None:
            self._serialized = run
        else:
            self.sketch.merge(ds.kll_items_sketch.deserialize(run, Utf8SerDe()))

    @property
    def sketch(self) -> Any:
        """The datasketches sketch, holding every value given so far."""
        self._settle()
        if self._sketch is None:
            self._sketch = (ds.kll_items_sketch(K) if self._serialized is None
                            else ds.kll_items_sketch.deserialize(self._serialized, Utf8SerDe()))
            self._serialized = None
        return self._sketch

    def update(self, values: pa.Array) -> None:
        if len(values) == 0:
            return
        if self.key_type == "IntType":
            self._sketch.update(np.array(to_numpy(values), dtype=np.int32))
        elif self.key_type == "LongType":
            self._sketch.update(to_numpy(values).astype(np.float64))
        else:
            self._pending.append(values)
            self._pending_rows += len(values)
            if self._pending_rows >= RUN_ROWS:
                self._settle()

    def merge(self, other: FieldSketch) -> None:
        self.sketch.merge(other.sketch)

    @property
    def count(self) -> int:
        return int(self.sketch.n)

    def _decode(self, v: Any) -> Any:
        if self.key_type == "LongType":
            return int(round(v))
        if self.key_type == "IntType":
            return int(v)
        if self.key_type == "ByteArrayType":
            return bytes.fromhex(v)
        return v

    def quantile(self, rank: float) -> Optional[Any]:
        if self.sketch.is_empty():
            return None
        return self._decode(self.sketch.get_quantile(rank))

    def min(self) -> Optional[Any]:
        return None if self.sketch.is_empty() else self._decode(self.sketch.get_min_value())

    def max(self) -> Optional[Any]:
        return None if self.sketch.is_empty() else self._decode(self.sketch.get_max_value())

    def serialize(self) -> bytes:
        self._settle()
        if self._sketch is None and self._serialized is not None:
            return self._serialized
        if self.key_type in ("IntType", "LongType"):
            return self.sketch.serialize()
        return self.sketch.serialize(Utf8SerDe())

    @classmethod
    def deserialize(cls, key_type: str, data: bytes) -> FieldSketch:
        if key_type == "IntType":
            return cls(key_type, ds.kll_ints_sketch.deserialize(data))
        if key_type == "LongType":
            return cls(key_type, ds.kll_doubles_sketch.deserialize(data))
        return cls(key_type, ds.kll_items_sketch.deserialize(data, Utf8SerDe()))


class RowKeySketches:
    """One :class:`FieldSketch` per row key field of a schema."""

    def __init__(self, schema: Schema, sketches: Optional[dict[str, FieldSketch]] = None):
        self.schema = schema
        self.fields = sketches or {f.name: FieldSketch(f.type) for f in schema.row_key_fields}  # type: ignore[arg-type]

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        for name, sk in self.fields.items():
            col = batch.column(name)
            if isinstance(col, pa.ChunkedArray):
                for chunk in col.chunks:
                    sk.update(chunk)
            else:
                sk.update(col)

    def merge(self, other: RowKeySketches) -> None:
        for name, sk in self.fields.items():
            sk.merge(other.fields[name])

    def to_bytes(self) -> bytes:
        return json.dumps({"version": 1, "fields": [
            {"name": n, "type": s.key_type, "sketch": base64.b64encode(s.serialize()).decode("ascii")}
            for n, s in self.fields.items()]}).encode()

    @classmethod
    def from_bytes(cls, schema: Schema, data: bytes) -> RowKeySketches:
        raw = json.loads(data)
        return cls(schema, {f["name"]: FieldSketch.deserialize(f["type"], base64.b64decode(f["sketch"]))
                            for f in raw["fields"]})


# ----- quantiles within a key range (partition splitting) ------------------------------
def _to_sketch_domain(key_type: str, value: Any) -> Any:
    """A key value as the sketch of ``key_type`` stores it (see the module docstring)."""
    if key_type == "LongType":
        return float(value)
    if key_type == "ByteArrayType":
        return value.hex()
    return value


def merged_field_sketch(key_type: str, sketches: Iterable[FieldSketch]) -> FieldSketch:
    """A new sketch of every value in ``sketches`` (which are left unchanged)."""
    out = FieldSketch(key_type)
    for s in sketches:
        out.merge(s)
    return out


@dataclass(frozen=True)
class RangeQuantiles:
    """What a sketch knows of its values inside one key range ``[lo, hi)``.

    Attributes:
        min, max: the least and greatest values the sketch retains inside the range
            (exact when the sketch is not in estimation mode; otherwise ``min`` may be
            above and ``max`` below the true ones, never outside the range).
        median: the value at the middle rank of the range's values.
        below_median: the greatest value the sketch retains inside the range below
            ``median`` (None when there is none).
        fraction: the approximate share of the sketch's values inside the range.
    """

    min: Any
    median: Any
    max: Any
    fraction: float
    below_median: Any = None


def range_quantiles(sketch: FieldSketch, lo: Any, hi: Optional[Any]) -> Optional[RangeQuantiles]:
    """The min, median and max of the values of ``sketch`` in ``[lo, hi)`` (``hi=None``:
    unbounded), or None if the sketch holds no value there.

    The median is the quantile at the midpoint of the ranks of ``lo`` and ``hi``, so a
    sketch of a whole file gives the median of the part of the file inside the range.
    """
    s = sketch.sketch
    if s.is_empty():
        return None
    t = sketch.key_type
    lo_s = _to_sketch_domain(t, lo)
    hi_s = None if hi is None else _to_sketch_domain(t, hi)
    a = s.get_rank(lo_s, inclusive=False)  # share of values below lo
    b = 1.0 if hi_s is None else s.get_rank(hi_s, inclusive=False)  # share below hi
    inside = [v for v in (s.get_min_value(), s.get_max_value(), *(item for item, _ in s))
              if lo_s <= v and (hi_s is None or v < hi_s)]
    if b <= a or not inside:
        return None
    median = s.get_quantile((a + b) / 2, inclusive=False)
    if not (lo_s <= median and (hi_s is None or median < hi_s)):  # float rounding at the edges
        return None
    dec = sketch._decode
    below = max((v for v in inside if v < median), default=None)
    return RangeQuantiles(dec(min(inside)), dec(median), dec(max(inside)), b - a,
                          None if below is None else dec(below))
