"""Rows of Sleeper's system-test schema made from a counter, for ``bench/scale.py``.

Row ``i`` (``0 <= i < MAX_ROWS``) has a distinct key, so a table of the first ``n`` rows
can be checked by content without keeping any key: the record of any ``i < n`` and the
rows of any key range are computed again from the counter.

The key is ``key-`` and 11 digits, the integer ``slot * STRIDE + offset`` where
``slot = (i * MULT) mod SLOTS`` (``MULT`` odd, so ``i -> slot`` runs through all 2**20
slots in every block of ``SLOTS`` consecutive counters) and ``offset = i // SLOTS``.
So every batch of consecutive counters spreads over the whole key space (it spans every
leaf partition, as random keys do, and leaves split at their medians), and slot ``s``
holds, in a table of ``n`` rows, exactly the offsets ``0 .. filled(s, n) - 1``.
Timestamps and values are mixed from the counter by multiplicative hashing, with the
entropy of :func:`sleeper_ops.demo.generate_rows`' (a 40-bit timestamp, values of 12
digits).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SLOTS = 1 << 20
MULT = 0x5BD1E995 & (SLOTS - 1) | 1
INV = pow(MULT, -1, SLOTS)
STRIDE = 10_000
#: the most rows the key layout holds (10.5 billion)
MAX_ROWS = SLOTS * STRIDE
_DIGITS = 11
_H1 = np.uint64(0x9E3779B97F4A7C15)
_H2 = np.uint64(0xD6E8FEB86659FD93)


def key_ints(counters: np.ndarray) -> np.ndarray:
    """The key integers of ``counters`` (int64)."""
    i = counters.astype(np.int64)
    return ((i * MULT) & (SLOTS - 1)) * STRIDE + (i >> 20)


def key_text(k: int) -> str:
    """The key string of key integer ``k``."""
    return f"key-{k:0{_DIGITS}d}"


def key_of(i: int) -> str:
    """The key of row ``i``."""
    return key_text(int(key_ints(np.array([i]))[0]))


def rows_of(counters: np.ndarray) -> pa.Table:
    """The rows of ``counters``, in their order."""
    i = counters.astype(np.int64)
    digits = pc.utf8_lpad(pc.cast(pa.array(key_ints(i)), pa.string()), width=_DIGITS, padding="0")
    u = i.astype(np.uint64)
    v = (u * _H1 >> np.uint64(24)).astype(np.int64) % 10**12
    return pa.table({
        "key": pc.binary_join_element_wise("key-", digits, ""),
        "timestamp": pa.array((u * _H2 >> np.uint64(24)).astype(np.int64), pa.int64()),
        "value1": pc.binary_join_element_wise("value1-", pc.cast(pa.array(v), pa.string()), ""),
        "value2": pc.binary_join_element_wise("value2-", pc.cast(pa.array(v * 7 % 10**12), pa.string()), ""),
    })


def rows(start: int, count: int) -> pa.Table:
    """Rows ``start .. start + count - 1``."""
    if start + count > MAX_ROWS:
        raise ValueError(f"the key layout holds {MAX_ROWS:,} rows, not {start + count:,}")
    return rows_of(np.arange(start, start + count, dtype=np.int64))


def record(i: int) -> dict[str, object]:
    """Row ``i`` as a dict of its columns."""
    return rows_of(np.array([i])).to_pylist()[0]


def range_width(n: int, rows_wanted: int = 1000) -> int:
    """The width, in key integers, of a range holding about ``rows_wanted`` of ``n`` rows."""
    return max(1, -(-rows_wanted * MAX_ROWS // n))


def counters_in(lo: int, hi: int, n: int) -> np.ndarray:
    """The counters ``i < n`` whose key integers lie in ``[lo, hi)``, in key order."""
    slots = np.arange(lo // STRIDE, min(SLOTS, -(-hi // STRIDE)), dtype=np.int64)
    first = (slots * INV) & (SLOTS - 1)  # the counter of each slot's offset 0
    filled = np.where(n > first, (n - first + SLOTS - 1) // SLOTS, 0)
    a = np.clip(lo - slots * STRIDE, 0, STRIDE)
    b = np.minimum(np.clip(hi - slots * STRIDE, 0, STRIDE), filled)
    out = [np.arange(x, y, dtype=np.int64) * SLOTS + f for x, y, f in zip(a, b, first) if y > x]
    return np.concatenate(out) if out else np.zeros(0, np.int64)
