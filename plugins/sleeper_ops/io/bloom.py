"""Parquet Bloom filters on a data file's first row key field: may a row group hold a key?

Every data file's writer asks Parquet for a split-block Bloom filter on the column of
the table's first row key field, one per row group, sized for the row group's rows at
``sleeper.table.parquet.rowkey.bloom.fpp`` (pyarrow's writer, and DataFusion's for
compaction, build it). An exact-key lookup reads, from each row group that the
statistics leave in, only its filter (a few KiB) first, and skips the row group when the
filter rules the key out: in a leaf of several overlapping files, each spanning the
leaf's whole key range, the statistics leave a row group in every file, and the
filters leave about one.

The format is the Parquet specification's (``BloomFilter.md``): a Thrift compact
``BloomFilterHeader`` (the bitset's size; algorithm, hash and compression, each a union
of one member), then the bitset of 32-byte blocks of eight 32-bit words. A value is
hashed with xxHash64 (seed 0) of its plain encoding: 4 or 8 bytes little-endian for
INT32 and INT64, the bytes themselves for BYTE_ARRAY (UTF-8 for strings).

The guarantee: :func:`may_contain` never says no for a value the row group holds. A
filter this module cannot read (none written: a file from before filters, or from a
table with them off; another algorithm, hash or compression; a header it does not
know) reads as None, which rules nothing out. A filter holds hashes only, never a
record: nothing of a deleted record survives in one that the erasure report must find.
"""

from __future__ import annotations

import struct
from typing import Any, Optional

import xxhash

#: the salts of the split-block filter's eight words (the Parquet specification)
_SALT = (0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D, 0x705495C7, 0x2DF1424B, 0x9EFC4947, 0x5C6BFB31)
_BLOCK_WORDS = struct.Struct("<8I")
_PLAIN = {"INT32": struct.Struct("<i"), "INT64": struct.Struct("<q")}
#: Thrift compact types of the header's fields
_I32, _STRUCT = 5, 12
#: bytes to read for a header when the footer does not give the filter's length
HEADER_GUESS = 32


def writer_options(field: str, rows: int, fpp: float) -> Optional[dict[str, dict[str, Any]]]:
    """pyarrow ``bloom_filter_options`` for a filter on ``field`` per row group of at most
    ``rows`` rows at false-positive rate ``fpp`` (0: none)."""
    return {field: {"ndv": rows, "fpp": fpp}} if fpp > 0 else None


def hash_of(value: Any, physical_type: str) -> Optional[int]:
    """The filter hash of ``value`` in a column of Parquet ``physical_type``; None when the
    value's Python type does not match the column's (then no filter is consulted)."""
    kind = type(value)
    if kind is int and physical_type in _PLAIN:
        try:
            data = _PLAIN[physical_type].pack(value)
        except struct.error:  # out of the column's range: no row holds it, but let the read say so
            return None
    elif kind is str and physical_type == "BYTE_ARRAY":
        data = value.encode()
    elif kind is bytes and physical_type == "BYTE_ARRAY":
        data = value
    else:
        return None
    return xxhash.xxh64_intdigest(data)


def may_contain(bitset: bytes, h: int) -> bool:
    """False only when the filter ``bitset`` rules out the value of hash ``h``."""
    blocks = len(bitset) // 32
    block = ((h >> 32) * blocks) >> 32
    key = h & 0xFFFFFFFF
    for word, salt in zip(_BLOCK_WORDS.unpack_from(bitset, block * 32), _SALT):
        if not (word >> (((key * salt) & 0xFFFFFFFF) >> 27)) & 1:
            return False
    return True


def parse_header(raw: bytes) -> Optional[tuple[int, int]]:
    """``(bitset bytes, header bytes)`` of a filter starting ``raw``, or None unless it is
    a split-block filter hashed by xxHash64 and uncompressed (each union's member 1)."""
    try:
        size, pos, members = None, 0, {}
        last = 0
        while True:
            fid, ftype, pos = _field(raw, pos, last)
            if ftype is None:
                break
            last = fid
            if ftype == _I32 and fid == 1:
                zigzag, pos = _varint(raw, pos)
                size = (zigzag >> 1) ^ -(zigzag & 1)
            elif ftype == _STRUCT and fid in (2, 3, 4):
                members[fid], pos = _union_member(raw, pos)
            else:
                return None
    except IndexError:
        return None
    if size is None or size <= 0 or size % 32 or members != {2: 1, 3: 1, 4: 1}:
        return None
    return size, pos


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = raw[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return out, pos


def _field(raw: bytes, pos: int, last: int) -> tuple[int, Optional[int], int]:
    """The next field's (id, type, position after its header); type None at a struct's end."""
    b = raw[pos]
    pos += 1
    if b == 0:
        return 0, None, pos
    delta, ftype = b >> 4, b & 0x0F
    if delta:
        return last + delta, ftype, pos
    zigzag, pos = _varint(raw, pos)
    return (zigzag >> 1) ^ -(zigzag & 1), ftype, pos


def _union_member(raw: bytes, pos: int) -> tuple[int, int]:
    """The member id of a union of empty structs at ``pos`` (-1: not such a union)."""
    fid, ftype, pos = _field(raw, pos, 0)
    if ftype != _STRUCT:
        return -1, pos
    _, inner, pos = _field(raw, pos, 0)  # the member's own (empty) struct ends at once
    _, end, pos = _field(raw, pos, fid)  # and so does the union
    return (fid if inner is None and end is None else -1), pos
