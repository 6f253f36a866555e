"""A chunk's rows in key order and split by leaf partition, from an 8-byte key prefix.

Standard ingest sorts each chunk by row keys then sort keys and cuts it into one
run per leaf partition. Arrow's comparison sort of a string column compares whole
strings, and the split compared every row with every split point: together about a
third of an ingest's CPU. Here each row's first row key becomes one unsigned 64-bit
number that orders as the key does:

* ints and longs: the value with its sign bit flipped;
* strings and bytes: the 8 bytes after the prefix that every key of the chunk shares
  (found 8 bytes at a time, as the leading bytes in which no key differs),
  big-endian, zero-padded.

A radix sort orders those numbers (no Python call, no string compared), on the bits
that vary between them only. Rows whose numbers
are equal (the same key, or strings that agree on those 8 bytes) are put in their
exact order by Arrow's stable sort on the row keys, the sort keys and then the input
position, so the order is exactly that of a stable sort on every key. A leaf's rows
are then one slice of the sorted order: each split point is found by binary search
of the numbers, and only the rows whose number equals the split point's are
compared with it.

:func:`sorted_leaf_slices` applies when every split of the partition tree is on the
first row key field and that field has no nulls; otherwise it answers None and the
caller sorts as before (:func:`sleeper_ops.engine.leaves.leaf_indices`); so it does
when more than a quarter of the rows tie (keys alike in their first 8 distinct bytes,
such as URLs of one site), where Arrow's sorts of each leaf in parallel are faster.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa

from sleeper_ops.engine import kernels
from sleeper_ops.engine.leaves import splits_along_one_dimension
from sleeper_ops.io.arrow_numpy import indices, to_numpy
from sleeper_ops.io.arrow_schema import key_scalar, sort_keys
from statestore.partitions import Partition, PartitionTree
from statestore.schema import Schema

_SIGN = np.uint64(1 << 63)
_LARGEST = np.uint64(2**64 - 1)
#: more rows than 1 in this many tied with the next (equal numbers) and the chunk takes the other path
MAX_TIED_SHARE = 4


def sorted_leaf_slices(table: pa.Table, tree: PartitionTree, schema: Schema
                       ) -> Optional[tuple[np.ndarray, list[tuple[Partition, int, int]]]]:
    """The row order of ``table`` sorted as a stable sort on the schema's row keys then
    sort keys would put it, and each leaf partition with rows as ``(leaf, start, end)``:
    its rows are ``order[start:end]``, leaves in key order. None when the fast path does
    not apply (see the module docstring)."""
    along = splits_along_one_dimension(tree)
    if along is None or along[0] != 0 or table.num_rows == 0:
        return None
    _, field, leaves, points = along
    column = table.column(field).combine_chunks()
    if column.null_count:
        return None
    numbers, number_of = _key_numbers(column)
    if numbers is None or number_of is None:
        return None
    order = radix_argsort(numbers)
    ordered = numbers[order]
    equal = ordered[1:] == ordered[:-1]
    if np.count_nonzero(equal) > len(order) // MAX_TIED_SHARE:
        return None  # keys alike in their first 8 distinct bytes: Arrow's per-leaf sorts are faster
    _settle_ties(table, schema, order, equal)
    bounds = [0]
    for point in points:
        bounds.append(_rows_below(column, order, ordered, point, number_of(point)))
    bounds.append(len(order))
    return order, [(leaf, a, b) for leaf, a, b in zip(leaves, bounds, bounds[1:]) if b > a]


def sorted_by_leaf(table: pa.Table, tree: PartitionTree,
                   schema: Schema) -> Optional[list[tuple[Partition, Callable[[], pa.Table]]]]:
    """Each leaf partition with rows in ``table``, leaves in key order, with a function
    giving its rows in key order (one take of :func:`sorted_leaf_slices`'s order); None
    where that does not apply (the caller sorts each leaf's rows itself)."""
    fast = sorted_leaf_slices(table, tree, schema)
    if fast is None:
        return None
    order, slices = fast
    return [(leaf, functools.partial(rows_at, table, order[a:b])) for leaf, a, b in slices]


def radix_argsort(numbers: np.ndarray) -> np.ndarray:
    """The stable sort order of unsigned 64-bit ``numbers``.

    Bits every number shares are dropped first and the others packed down (two numbers
    first differ at a bit that varies, so packing keeps their order): keys of decimal
    digits vary in 4 bits of each byte, so 8 bytes make 32 bits. When those bits and the
    row positions fit one 64-bit word together, one sort of ``packed << position bits |
    position`` (numpy's vectorised sort of plain integers) is the stable order, read from
    the low bits: about half the CPU of the radix passes for 200,000 decimal keys. Else a
    least-significant-digit radix sort on 16-bit digits, each pass numpy's stable sort of
    16-bit integers (a counting sort): about a third of the CPU of ``np.argsort`` (a
    comparison sort) for 200,000 numbers."""
    n = len(numbers)
    if n < 2:
        return np.arange(n)
    varying = int(np.bitwise_or.reduce(numbers ^ numbers[0]))
    position_bits = (n - 1).bit_length()
    runs = _runs(varying)
    if varying.bit_count() + position_bits <= 64 and len(runs) <= _MOST_RUNS:
        packed = _pack(numbers, runs) << np.uint64(position_bits)
        packed |= np.arange(n, dtype=np.uint64)
        packed.sort()
        return (packed & np.uint64((1 << position_bits) - 1)).astype(np.intp)
    numbers = _varying_bits(numbers, varying, runs)
    order: Optional[np.ndarray] = None
    for shift in (0, 16, 32, 48):
        digits = ((numbers >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.uint16)
        if order is not None:
            digits = digits[order]
        if digits.min() == digits.max():
            continue
        step = np.argsort(digits, kind="stable")
        order = step if order is None else order[step]
    return order if order is not None else np.arange(len(numbers))


#: most runs of varying bits worth gathering: each costs a few passes over the numbers
_MOST_RUNS = 12


def _varying_bits(numbers: np.ndarray, varying: int, runs: list[tuple[int, int]]) -> np.ndarray:
    """``numbers`` with the bits that every one of them shares removed and the others
    packed down, in order (:func:`_pack`); ``varying``: the bits in which some number
    differs from the first, ``runs`` their runs (:func:`_runs`). ``numbers`` itself when
    that would not save a 16-bit pass or would take more than :data:`_MOST_RUNS` runs."""
    digits = sum(1 for shift in (0, 16, 32, 48) if (varying >> shift) & 0xFFFF)
    if -(-varying.bit_count() // 16) >= digits or len(runs) > _MOST_RUNS:
        return numbers
    return _pack(numbers, runs)


def _pack(numbers: np.ndarray, runs: list[tuple[int, int]]) -> np.ndarray:
    """The bits of ``numbers`` in ``runs`` (as :func:`_runs` gives them), packed down into
    the low bits in order: numbers that agree outside the runs compare as before."""
    packed = np.zeros_like(numbers)
    at = 0
    for start, width in runs:
        packed |= ((numbers >> np.uint64(start)) & np.uint64((1 << width) - 1)) << np.uint64(at)
        at += width
    return packed


def _runs(bits: int) -> list[tuple[int, int]]:
    """The runs of set bits of ``bits`` as (lowest bit, width), lowest first."""
    runs = []
    at = 0
    while bits:
        gap = (bits & -bits).bit_length() - 1  # zeros below the next run
        bits >>= gap
        at += gap
        width = (~bits & (bits + 1)).bit_length() - 1  # its ones
        runs.append((at, width))
        bits >>= width
        at += width
    return runs


def rows_at(table: pa.Table, positions: np.ndarray) -> pa.Table:
    """The rows of ``table`` at ``positions`` (a slice of a :func:`sorted_leaf_slices`
    order), in that order."""
    return kernels.take(table, indices(positions))


def _key_numbers(column: pa.Array) -> tuple[Optional[np.ndarray], Optional[Callable[[Any], np.uint64]]]:
    """Each row's order-preserving unsigned 64-bit number, and the function giving a
    split point's number (None, None for a type without one). A string or bytes split
    point that does not start with the chunk's shared prefix gets the smallest or largest
    number: the rows with that number are compared with it exactly."""
    t = column.type
    if pa.types.is_int64(t) or pa.types.is_int32(t):
        values = to_numpy(column).astype(np.int64)
        return values.view(np.uint64) ^ _SIGN, lambda v: np.uint64(int(v) + (1 << 63))
    if not (pa.types.is_string(t) or pa.types.is_binary(t)) or len(column) == 0:
        return None, None
    n = len(column)
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32, count=n + 1, offset=column.offset * 4)
    data = column.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    shortest = int(lengths.min())
    skip = 0
    words = _words(offsets, raw, skip)
    while True:  # the bytes every key shares: leading bytes of the words that no key differs in
        step = min((64 - int(np.bitwise_or.reduce(words ^ words[0])).bit_length()) // 8, shortest - skip)
        if step <= 0:
            break
        skip += step
        words = _words(offsets, raw, skip)
        if step < 8:
            break
    prefix = raw[offsets[0]:offsets[0] + skip].tobytes()

    def number_of(point: Any) -> np.uint64:
        b = _as_bytes(point)
        if b[:skip] != prefix:
            return np.uint64(0) if b[:skip] < prefix else _LARGEST
        return _bytes_number(b[skip:])
    if shortest - skip >= 8:
        return words, number_of
    # the bytes past each key's end (another key's, or the buffer's padding) masked off
    length = np.minimum(lengths - skip, 8).astype(np.uint64)
    keep = np.where(length > 0, np.left_shift(~np.uint64(0), (np.uint64(8) - length) * np.uint64(8) % np.uint64(64)),
                    np.uint64(0))
    return words & keep, number_of


def _as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _bytes_number(b: bytes) -> np.uint64:
    return np.uint64(int.from_bytes(b[:8].ljust(8, b"\0"), "big"))


def _words(offsets: np.ndarray, raw: np.ndarray, skip: int) -> np.ndarray:
    """The big-endian number of the 8 bytes at byte ``skip`` of each value (``offsets``
    into ``raw``; every value at least ``skip`` bytes long), past its end included: one
    gather from a view of the data buffer whose element ``i`` is the 8 bytes at byte
    ``i``, the last few from a zero-padded copy of the buffer's end."""
    n = len(offsets) - 1
    starts = offsets[:-1].astype(np.int64) + skip
    words = np.empty(n, dtype=np.uint64)
    direct = int(np.searchsorted(starts, len(raw) - 8, side="right"))  # rows with 8 bytes left in the buffer
    if direct:  # gathered in the machine's order, then swapped: a big-endian gather is twice as slow
        view = np.ndarray(shape=(len(raw) - 7,), dtype="<u8", buffer=raw, strides=(1,))
        words[:direct] = view[starts[:direct]].byteswap()
    if direct < n:
        base = int(starts[direct])
        tail = np.zeros(len(raw) - base + 8, dtype=np.uint8)
        tail[:len(raw) - base] = raw[base:]
        view = np.ndarray(shape=(len(tail) - 7,), dtype=">u8", buffer=tail, strides=(1,))
        words[direct:] = view[starts[direct:] - base]
    return words


def _settle_ties(table: pa.Table, schema: Schema, order: np.ndarray, equal: np.ndarray) -> None:
    """Put the rows of each run of equal numbers in ``order`` (``equal[i]``: the numbers
    at ``i`` and ``i + 1`` are equal) into their exact order (row keys, sort keys, then
    input position), in place."""
    if not equal.any():
        return
    in_run = np.zeros(len(order), dtype=bool)
    in_run[1:] |= equal
    in_run[:-1] |= equal
    positions = np.flatnonzero(in_run)
    run = np.cumsum(np.concatenate([[1], ~equal[positions[:-1]]]))  # a run's rows are adjacent
    rows = order[positions]
    names = schema.key_names
    run_name, row_name = (base + "_" * max(len(n) for n in names) for base in ("run", "row"))  # names no key has
    sub = kernels.take(table.select(names), indices(rows))
    sub = sub.append_column(run_name, indices(run)).append_column(row_name, indices(rows))
    settled = to_numpy(kernels.sort_indices(sub, [(run_name, "ascending"), *sort_keys(schema),
                                                   (row_name, "ascending")]))
    order[positions] = rows[settled]


def _rows_below(column: pa.Array, order: np.ndarray, ordered: np.ndarray, point: object, number: np.uint64) -> int:
    """How many rows have a first row key below ``point`` (a split point whose number is
    ``number``): those with smaller numbers, and of those with the same number the ones
    an exact comparison puts below."""
    lo = int(np.searchsorted(ordered, number, side="left"))
    hi = int(np.searchsorted(ordered, number, side="right"))
    if hi == lo:
        return lo
    keys = kernels.take(column, indices(order[lo:hi]))
    below = to_numpy(kernels.less(keys, key_scalar(point, column.type)))
    return lo + int(np.count_nonzero(below))
