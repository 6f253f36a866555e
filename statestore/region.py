"""Ranges and regions over row keys.

A :class:`Range` covers ``[min, max)`` of one row key field; ``max=None`` means
unbounded. A :class:`Region` holds one range per row key field, in schema order. A
key (a tuple of row key values) is in a region when every value is in its range.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Optional, Sequence


def encode_value(v: Any) -> Any:
    """Encode a key value for JSON (bytes become ``{"b64": ...}``)."""
    if isinstance(v, bytes):
        return {"b64": base64.b64encode(v).decode("ascii")}
    return v


def decode_value(v: Any) -> Any:
    """Inverse of :func:`encode_value`."""
    if isinstance(v, dict) and "b64" in v:
        return base64.b64decode(v["b64"])
    return v


@dataclass(frozen=True)
class Range:
    """``[min, max)`` of one row key field; ``max is None`` is unbounded above."""

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

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "min": encode_value(self.min), "max": encode_value(self.max)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Range:
        return cls(d["field"], decode_value(d["min"]), decode_value(d["max"]))


@dataclass(frozen=True)
class Region:
    """One :class:`Range` per row key field, in schema order."""

    ranges: tuple[Range, ...]

    def contains(self, key: Sequence[Any]) -> bool:
        return all(r.contains(v) for r, v in zip(self.ranges, key))

    def overlaps(self, other: Region) -> bool:
        return all(a.overlaps(b.min, b.max) for a, b in zip(self.ranges, other.ranges))

    def with_range(self, dimension: int, new: Range) -> Region:
        rs = list(self.ranges)
        rs[dimension] = new
        return Region(tuple(rs))

    def to_dict(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.ranges]

    @classmethod
    def from_dict(cls, d: list[dict[str, Any]]) -> Region:
        return cls(tuple(Range.from_dict(r) for r in d))
