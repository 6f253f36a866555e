"""Bloom filters on the first row key field (``sleeper.table.parquet.rowkey.bloom.fpp``):
a key lookup skips the row groups whose filter rules its key out, and never one that
holds it.

The model is the file itself: which keys each row group holds, read back from it. Every
key a row group holds must be kept by the probe (no false negative, for each key type,
in files written by ingest's pyarrow writer and by compaction's DataFusion writer), and
absent keys must mostly be ruled out."""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.io import bloom
from sleeper_ops.io.datafile import ParquetFileCache, ParquetSettings, write_data_file
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.query.runner import QueryRunner
from statestore.errors import PropertyError
from statestore.memory import InMemoryStateStore
from statestore.schema import Schema

FPP = "sleeper.table.parquet.rowkey.bloom.fpp"

KINDS = {
    "LongType": (pa.int64(), lambda rnd: rnd.randrange(-2**63, 2**63)),
    "IntType": (pa.int32(), lambda rnd: rnd.randrange(-2**31, 2**31)),
    "StringType": (pa.string(),
                   lambda rnd: "".join(rnd.choice("aZé\u00ff\U0001f600") for _ in range(rnd.randrange(0, 12)))),
    "ByteArrayType": (pa.binary(), lambda rnd: bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 12)))),
}


def schema_of(kind: str) -> Schema:
    return Schema.from_dict({"rowKeyFields": [{"name": "k", "type": kind}],
                             "valueFields": [{"name": "v", "type": "LongType"}]})


def groups_holding(path: str, column: str = "k") -> list[set]:
    """The model: the keys each row group of the file at ``path`` holds, read back."""
    pf = pq.ParquetFile(path)
    return [set(pf.read_row_group(g, columns=[column]).column(0).to_pylist()) for g in range(pf.num_row_groups)]


def kept_groups(store: ObjectStore, key: str, value, cache: ParquetFileCache) -> list[int]:
    md, index = cache.row_group_index(store, key, "k")
    assert index is not None
    return cache.may_hold(store, key, md, index, range(md.num_row_groups), value)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_row_group_is_never_skipped_for_a_key_it_holds(tmp_path, kind):
    type_, value = KINDS[kind]
    rnd = random.Random(kind)
    keys = sorted({value(rnd) for _ in range(3000)})
    store = ObjectStore(str(tmp_path))
    table = pa.table({"k": pa.array(keys, type_), "v": pa.array(range(len(keys)), pa.int64())})
    write_data_file(store, "f.parquet", schema_of(kind), table, ParquetSettings(row_group_rows=256, bloom_fpp=0.01))
    holding = groups_holding(str(tmp_path / "f.parquet"))
    cache = ParquetFileCache()
    for k in rnd.sample(keys, 400):
        want = {g for g, held in enumerate(holding) if k in held}
        assert want <= set(kept_groups(store, "f.parquet", k, cache)), k
    absent = [a for a in (value(rnd) for _ in range(2000)) if a not in set(keys)]
    kept = sum(len(kept_groups(store, "f.parquet", a, cache)) for a in absent)
    assert kept / (len(absent) * len(holding)) < 0.05  # 0.01 asked; the bitset's size is rounded up


@pytest.mark.parametrize("kind", ["StringType", "LongType"])
def test_compaction_writes_filters_that_hold_every_key_of_its_output(tmp_path, kind):
    type_, value = KINDS[kind]
    rnd = random.Random(7)
    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    try:
        t = s.create_table("t", schema_of(kind).to_dict(), properties={
            "sleeper.table.compaction.strategy": "basic", "sleeper.table.parquet.rowgroup.rows.max": "128"})
        keys: set = set()
        for _ in range(3):
            batch = {value(rnd) for _ in range(500)} - keys
            keys |= batch
            t.ingest(pa.table({"k": pa.array(sorted(batch), type_), "v": pa.array(range(len(batch)), pa.int64())}))
        t.compact()
        [ref] = t.state().references.values()
        path = str(tmp_path / "data" / ref.filename)
        assert pq.read_metadata(path).row_group(0).column(0).bloom_filter_offset  # DataFusion wrote one
        holding = groups_holding(path)
        assert set().union(*holding) == keys and sum(map(len, holding)) == len(keys)
        cache, store = ParquetFileCache(), ObjectStore(str(tmp_path / "data"))
        for k in keys:
            assert {g for g, held in enumerate(holding) if k in held} <= set(kept_groups(store, ref.filename, k, cache))
    finally:
        s.close()


def test_an_exact_key_reads_only_the_file_that_holds_it(tmp_path, monkeypatch):
    """Six files in one leaf, each spanning the leaf's whole key range: the statistics keep
    a row group in every file; the filters keep the one file holding the key."""
    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    try:
        t = s.create_table("t", schema_of("LongType").to_dict())
        for f in range(6):
            keys = list(range(f, 6000, 6))  # file f holds the keys equal to f modulo 6
            t.ingest(pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([f] * len(keys), pa.int64())}))
        read: list[str] = []
        real = QueryRunner._read_at

        def counted(self, task, md, groups, before_decode=None):
            read.append(task.ref.filename)
            return real(self, task, md, groups, before_decode)

        monkeypatch.setattr(QueryRunner, "_read_at", counted)
        for k in (0, 1, 2999, 5999, 4000):
            read.clear()
            result = t.query(keys=[k])
            assert result.to_pylist() == [{"k": k, "v": k % 6}]
            assert len(read) == 1, read
        read.clear()
        assert t.query(keys=[6000]).num_rows == 0 and len(read) <= 1  # absent: at most a false positive
        assert t.query(ranges=[(100, 160)]).num_rows == 60  # a range reads every file, as before
        assert len(set(read)) == 6
    finally:
        s.close()


def test_files_without_filters_and_with_them_answer_alike(tmp_path):
    """A table written before filters (here: with them off), then on: lookups find every
    key in either kind of file; files written with the filter off have none."""
    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    try:
        t = s.create_table("t", schema_of("StringType").to_dict(), properties={FPP: "0"})
        rnd = random.Random(3)
        old = sorted({f"{rnd.randrange(10**9):09d}" for _ in range(2000)})
        t.ingest(pa.table({"k": old, "v": pa.array(range(len(old)), pa.int64())}))
        [before] = t.state().references.values()
        footer = pq.read_metadata(str(tmp_path / "data" / before.filename))
        assert footer.row_group(0).column(0).bloom_filter_offset is None
        s.set_properties("t", {FPP: "0.05"})
        new = sorted({f"{rnd.randrange(10**9):09d}" for _ in range(2000)} - set(old))
        t.ingest(pa.table({"k": new, "v": pa.array(range(len(new)), pa.int64())}))
        for k in rnd.sample(old, 100) + rnd.sample(new, 100):
            assert t.query(keys=[k]).column("k").to_pylist() == [k]
        assert t.query(ranges=[("", None)]).num_rows == len(old) + len(new)
    finally:
        s.close()


@pytest.mark.parametrize("bad", ["0.6", "-0.1", "often", "1"])
def test_a_bad_false_positive_rate_is_refused_naming_the_setting(tmp_path, bad):
    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    try:
        with pytest.raises(PropertyError, match=r"sleeper\.table\.parquet\.rowkey\.bloom\.fpp"):
            s.create_table("t", schema_of("LongType").to_dict(), properties={FPP: bad})
        assert s.tables() == []
    finally:
        s.close()


def header(size: int, algorithm: int = 1, hash_: int = 1, compression: int = 1) -> bytes:
    """A BloomFilterHeader in Thrift's compact protocol, as the Parquet specification has it."""
    zigzag = size << 1
    varint = bytearray()
    while True:
        b, zigzag = zigzag & 0x7F, zigzag >> 7
        varint.append(b | (0x80 if zigzag else 0))
        if not zigzag:
            break

    def union(member: int) -> bytes:  # a struct field, holding one empty-struct member
        return bytes([0x1C, (member << 4) | 0x0C, 0, 0])
    return bytes([0x15]) + bytes(varint) + union(algorithm) + union(hash_) + union(compression) + b"\x00"


def test_only_a_split_block_xxhash_uncompressed_filter_is_read():
    assert bloom.parse_header(header(4096) + b"\x00" * 4096) == (4096, len(header(4096)))
    assert bloom.parse_header(header(4096, algorithm=2)) is None
    assert bloom.parse_header(header(4096, hash_=2)) is None
    assert bloom.parse_header(header(4096, compression=2)) is None
    assert bloom.parse_header(header(100)) is None  # not whole 32-byte blocks
    assert bloom.parse_header(header(4096)[:6]) is None  # cut short
    assert bloom.parse_header(b"\x18\x02ab") is None  # a field this header does not have


def test_a_value_of_another_type_than_the_column_consults_no_filter():
    assert bloom.hash_of(1, "BYTE_ARRAY") is None
    assert bloom.hash_of("1", "INT64") is None
    assert bloom.hash_of(2**40, "INT32") is None  # out of the column's range
    assert bloom.hash_of(True, "INT64") is None
    assert bloom.hash_of(5, "INT64") == bloom.hash_of(5, "INT64") != bloom.hash_of(5, "INT32")
    assert bloom.hash_of("é", "BYTE_ARRAY") == bloom.hash_of("é".encode(), "BYTE_ARRAY")


def test_a_set_bit_per_word_is_what_may_contain_asks():
    """One block: the eight words the salts pick for a hash. With those bits set the
    value may be there; with any one cleared it is ruled out."""
    h = 0x0123456789ABCDEF
    key = h & 0xFFFFFFFF
    words = [1 << (((key * salt) & 0xFFFFFFFF) >> 27) for salt in bloom._SALT]
    bits = struct.pack("<8I", *words)
    assert bloom.may_contain(bits, h)
    for i in range(8):
        cleared = list(words)
        cleared[i] = 0
        assert not bloom.may_contain(struct.pack("<8I", *cleared), h)


def _remote_file(tmp_path, rows: int = 20_000):
    """A data file with filters, and a reader of it as a remote store gives one."""
    keys = [f"k{i:06d}" for i in range(rows)]
    store = ObjectStore(str(tmp_path))
    write_data_file(store, "f.parquet", schema_of("StringType"),
                    pa.table({"k": pa.array(keys), "v": pa.array(range(rows), pa.int64())}),
                    ParquetSettings(row_group_rows=500, bloom_fpp=0.01))
    return store, pa.BufferReader((tmp_path / "f.parquet").read_bytes())


def _read_one_by_one(store: ObjectStore, md: pq.FileMetaData) -> dict:
    """The model: each row group's filter read on its own, as a local store reads it."""
    cache = ParquetFileCache()
    return {(g, 0): cache._filter(store, "f.parquet", md, g, 0) for g in range(md.num_row_groups)}


def test_a_remote_footers_one_read_brings_every_filter_that_lies_in_it(tmp_path, monkeypatch):
    from sleeper_ops.io import remote_footer

    store, remote = _remote_file(tmp_path)
    md, filters = remote_footer.footer_and_filters(remote)
    assert md.num_rows == 20_000 and md.num_row_groups == 40
    model = _read_one_by_one(store, md)
    assert filters == model and all(model.values())
    # a read that ends inside the filters: only those wholly in it, each as read alone
    size = remote.size()
    first = md.row_group(0).column(0).bloom_filter_offset
    last = md.row_group(39).column(0)
    middle = (first + last.bloom_filter_offset + last.bloom_filter_length) // 2
    monkeypatch.setattr(remote_footer, "TAIL_MAX_BYTES", size - middle)
    monkeypatch.setattr(remote_footer, "TAIL_MIN_BYTES", 0)
    monkeypatch.setattr(remote_footer, "TAIL_SHARE", 1)
    md2, part = remote_footer.footer_and_filters(remote)
    assert md2.num_rows == 20_000 and 0 < len(part) < 40
    assert all(model[at] == bits for at, bits in part.items())
    # a footer longer than the read: read whole on its own, no filter
    monkeypatch.setattr(remote_footer, "TAIL_MAX_BYTES", 64)
    md3, none = remote_footer.footer_and_filters(remote)
    assert md3.num_rows == 20_000 and none == {}
