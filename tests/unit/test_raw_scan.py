"""The erasure oracle's raw scan (tests/oracle/raw_scan.py) finds what it should, on
hand-made objects in a directory: a needle inside a zstd-compressed Parquet page (with no
statistics, so the raw bytes do not show it), inside an Arrow IPC buffer (compressed),
inside zlib JSON, as base64 in JSON, nested (zlib JSON holding base64 of a zstd Arrow
stream), and in bytes it cannot decode; and nothing where there is none."""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from tests.oracle.formats import Needles
from tests.oracle.raw_scan import Places, raw_scan

NEEDLE = "alice.erased@example.org"
OTHER = [f"user{i:05d}@example.org" for i in range(2000)]


def _rows_with_needle() -> pa.Table:
    keys = [*OTHER[:1000], NEEDLE, *OTHER[1000:]]
    return pa.table({"key": keys, "v": [f"value-{i}" for i in range(len(keys))]})


def _arrow_stream(table: pa.Table, compression: str | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def test_finds_a_needle_inside_a_zstd_parquet_page_the_raw_bytes_do_not_show(tmp_path: Path) -> None:
    path = tmp_path / "data" / "t" / "part.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(_rows_with_needle(), path, compression="zstd", write_statistics=False, use_dictionary=False,
                   row_group_size=700)
    assert not Needles([NEEDLE]).search(path.read_bytes())  # only decoding finds it

    result = raw_scan(Places(directories=[tmp_path / "data"]), [NEEDLE, "nobody@example.org"])

    assert [(h.where, h.how) for h in result.found(NEEDLE)] == [("file:data/t/part.parquet", "parquet[rg 1].key")]
    assert result.found("nobody@example.org") == []
    assert (result.objects, result.decoded, result.raw_only) == (1, 1, 0)


def test_finds_a_needle_in_a_map_value_of_a_parquet_file(tmp_path: Path) -> None:
    maps = pa.array([[("x", "1")], [("y", NEEDLE)]], pa.map_(pa.string(), pa.string()))
    table = pa.table({"key": ["a", "b"], "m": maps})
    pq.write_table(table, tmp_path / "m.parquet", compression="zstd", write_statistics=False)

    result = raw_scan(Places(directories=[tmp_path]), [NEEDLE])

    assert "parquet[rg 0].m" in {h.how for h in result.found(NEEDLE)}


def test_finds_a_needle_inside_a_compressed_arrow_ipc_buffer(tmp_path: Path) -> None:
    data = _arrow_stream(_rows_with_needle(), compression="zstd")
    assert not Needles([NEEDLE]).search(data)
    (tmp_path / "blob.arrow").write_bytes(data)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, _rows_with_needle().schema) as w:
        w.write_table(_rows_with_needle())
    (tmp_path / "file.arrow").write_bytes(sink.getvalue().to_pybytes())

    result = raw_scan(Places(directories=[tmp_path]), [NEEDLE])

    assert sorted((h.where, h.how) for h in result.found(NEEDLE)) == [
        ("file:" + tmp_path.name + "/blob.arrow", "arrow-stream.key"),
        ("file:" + tmp_path.name + "/file.arrow", "arrow-file[batch 0].key"),
        ("file:" + tmp_path.name + "/file.arrow", "raw"),  # uncompressed: the buffer holds it as is
    ]


def test_finds_a_needle_inside_zlib_gzip_and_zstd_json(tmp_path: Path) -> None:
    doc = json.dumps({"regions": [{"min": [NEEDLE], "max": [NEEDLE + "\x00"]}] * 50}).encode()
    (tmp_path / "body.zlib").write_bytes(zlib.compress(doc, 1))
    (tmp_path / "body.gz").write_bytes(gzip.compress(doc))
    (tmp_path / "body.zst").write_bytes(zstandard.ZstdCompressor().compress(doc))

    result = raw_scan(Places(directories=[tmp_path]), [NEEDLE])

    assert sorted({(h.where.rsplit("/", 1)[1], h.how) for h in result.found(NEEDLE)}) == [
        ("body.gz", "gzip"), ("body.gz", "gzip>json"), ("body.zlib", "zlib"), ("body.zlib", "zlib>json"),
        ("body.zst", "zstd"), ("body.zst", "zstd>json")]


def test_finds_a_bytes_key_as_base64_in_json_at_every_alignment(tmp_path: Path) -> None:
    key = bytes(range(7, 40))
    for pad in range(3):
        prefixed = base64.b64encode(b"p" * pad + key).decode()
        (tmp_path / f"doc{pad}.json").write_text(json.dumps({"key": prefixed}))

    result = raw_scan(Places(directories=[tmp_path]), [key])

    assert {h.where.rsplit("/", 1)[1] for h in result.found("b64:" + base64.b64encode(key).decode())} == {
        "doc0.json", "doc1.json", "doc2.json"}


def test_follows_a_zstd_arrow_stream_in_base64_inside_zlib_json(tmp_path: Path) -> None:
    inner = base64.b64encode(zstandard.ZstdCompressor().compress(_arrow_stream(_rows_with_needle()))).decode()
    (tmp_path / "nested.bin").write_bytes(zlib.compress(json.dumps({"blob": inner}).encode()))

    result = raw_scan(Places(directories=[tmp_path]), [NEEDLE])

    assert "zlib>json>base64>zstd>arrow-stream.key" in {h.how for h in result.found(NEEDLE)}


def test_finds_a_needle_in_bytes_it_cannot_decode(tmp_path: Path) -> None:
    (tmp_path / "sketch.bin").write_bytes(b"\x02\x03\x11\x08garbage" + NEEDLE.encode() + b"\xff\x00tail")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1" + NEEDLE.encode() + b"PAR1")  # not a real Parquet file

    result = raw_scan(Places(directories=[tmp_path]), [NEEDLE])

    assert sorted((h.where.rsplit("/", 1)[1], h.how) for h in result.found(NEEDLE)) == [
        ("broken.parquet", "raw"), ("sketch.bin", "raw")]
    assert result.raw_only == 2


def test_finds_nothing_where_there_is_nothing(tmp_path: Path) -> None:
    pq.write_table(pa.table({"key": OTHER}), tmp_path / "other.parquet", compression="zstd")
    (tmp_path / "other.json").write_text(json.dumps({"keys": OTHER}))

    result = raw_scan(Places(directories=[tmp_path]), [NEEDLE, "user1@example.org"])

    assert result.hits == []
    assert result.objects == 2


def test_the_raw_scan_imports_none_of_the_products_code() -> None:
    import ast

    import tests.oracle.formats
    import tests.oracle.raw_scan

    for module in (tests.oracle.raw_scan, tests.oracle.formats):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported -= {"tests.oracle.formats"}  # the scan's own formats
        ours = sorted(m for m in imported if m.split(".")[0] in ("sleeper_ops", "statestore", "tests", "plugins"))
        assert ours == [], f"{module.__name__} must not use the product's code: {ours}"
        assert {m.split(".")[0] for m in imported} <= {
            "__future__", "base64", "binascii", "gzip", "io", "json", "os", "re", "zlib", "dataclasses", "pathlib",
            "typing", "pyarrow", "zstandard", "boto3", "psycopg"}, module.__name__
