"""Ranges and regions over row keys.

A :class:`Range` covers ``[min, max)`` of one row key field; ``max=None`` means
unbounded. A :class:`Region` holds one range per row key field, in schema order. A
key (a tuple of row key values) is in a region when every value is in its range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Sequence

from statestore.codec import Record, decode_value, encode_value

__all__ = ["Range", "Region", "decode_value", "encode_value"]


@dataclass(frozen=True)
class Range(Record):
    """``[min, max)`` of one row key field; ``max is None`` is unbounded above. Written
    as ``{"field", "min", "max"}`` with bytes bounds as ``{"b64": ...}``."""

    field: str
    min: Any
    max: Optional[Any] = None

    def contains(self, value: Any) -> bool:
        return self.min <= value and (self.max is None or value < self.max)

    def overlaps(self, lo: Any, hi: Optional[Any]) -> bool:
        """True when ``[lo, hi)`` (``hi=None`` unbounded) meets this range."""
        if hi is not None and hi <= self.min:
            return False
        if self.max is not None and lo >= self.max:
            return False
        return True


@dataclass(frozen=True)
class Region(Record):
    """One :class:`Range` per row key field, in schema order; written as the list of them."""

    CODEC_UNWRAP: ClassVar[bool] = True
    ranges: tuple[Range, ...]

    def contains(self, key: Sequence[Any]) -> bool:
        return all(r.contains(v) for r, v in zip(self.ranges, key))

    def overlaps(self, other: Region) -> bool:
        return all(a.overlaps(b.min, b.max) for a, b in zip(self.ranges, other.ranges))

    def with_range(self, dimension: int, new: Range) -> Region:
        rs = list(self.ranges)
        rs[dimension] = new
        return Region(tuple(rs))
