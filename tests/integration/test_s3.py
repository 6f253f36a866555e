"""The object store and ingest/query on S3, through moto's server on 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import random
import socket
from collections import Counter
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.errors import IngestError, StorageError
from sleeper_ops.io.datafile import sketch_key
from sleeper_ops.io.storage import ObjectStore, S3Options
from statestore.memory import InMemoryStateStore
from tests.aging import age_files

pytestmark = pytest.mark.integration

BUCKET = "sleeper-data"
CREDS = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "region_name": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def moto_endpoint():
    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        port = _free_port()
        server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            endpoint = f"127.0.0.1:{port}"
            client = boto3.client("s3", endpoint_url=f"http://{endpoint}", **CREDS)
            client.create_bucket(Bucket=BUCKET)
            yield endpoint, client
        finally:
            server.stop()


@pytest.fixture(scope="module")
def s3_options(moto_endpoint):
    endpoint, _ = moto_endpoint
    return S3Options(endpoint_override=endpoint, scheme="http", access_key="test", secret_key="test",
                     region="us-east-1")


@pytest.fixture
def client(moto_endpoint):
    return moto_endpoint[1]


@pytest.fixture
def store(s3_options, request):
    # A prefix per test keeps tests apart in the one bucket.
    return ObjectStore(f"s3://{BUCKET}/tables/{request.node.name}", s3_options)


def bucket_keys(client, prefix: str) -> list[str]:
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return out


# ----- the five verbs ---------------------------------------------------------------------

def test_put_then_get_head_and_list_see_the_object(store, client, request):
    store.put("t1/data/a.bin", b"hello world")
    store.put("t1/data/sub/b.bin", b"\x00" * 1000)
    store.put("t2/other.bin", b"x")

    assert store.get("t1/data/a.bin") == b"hello world"
    head = store.head("t1/data/a.bin")
    assert head is not None and head.key == "t1/data/a.bin" and head.size == 11 and head.mtime_ms > 0
    assert sorted(o.key for o in store.list("t1")) == ["t1/data/a.bin", "t1/data/sub/b.bin"]
    assert {o.key: o.size for o in store.list("t1/data/sub")} == {"t1/data/sub/b.bin": 1000}
    # Keys are relative to the store's root, which is a prefix in the bucket.
    assert f"tables/{request.node.name}/t1/data/a.bin" in bucket_keys(client, "tables/")


def test_ranged_get_reads_only_the_asked_bytes(store):
    data = bytes(range(256)) * 40
    store.put("r/obj", data)
    with store.open_input("r/obj") as f:
        assert f.size() == len(data)
        assert f.read_at(16, 5000) == data[5000:5016]
        f.seek(len(data) - 4)
        assert f.read() == data[-4:]


def test_open_output_writes_the_whole_object_on_close(store):
    with store.open_output("w/streamed.bin") as out:
        for i in range(10):
            out.write(bytes([i]) * 100_000)
    assert store.head("w/streamed.bin").size == 1_000_000
    assert store.get("w/streamed.bin")[-1] == 9


def test_delete_removes_the_object_and_deleting_a_missing_one_is_not_an_error(store, client, request):
    store.put("d/x", b"1")
    store.put("d/y", b"2")
    store.delete("d/x")
    assert store.head("d/x") is None
    assert [o.key for o in store.list("d")] == ["d/y"]
    store.delete("d/x")
    store.delete("d/never-written")
    store.delete("d/y")
    assert list(store.list("d")) == []
    # Nothing at all is left in the bucket, not even an empty "directory" marker object.
    assert bucket_keys(client, f"tables/{request.node.name}/") == []


def test_missing_objects_head_none_list_empty_and_get_raises_storage_error(store):
    assert store.head("nope/missing") is None
    assert list(store.list("nope")) == []
    with pytest.raises(StorageError, match="missing"):
        store.get("nope/missing")


def test_fresh_names_never_collide(store):
    names = {ObjectStore.fresh_name(".parquet") for _ in range(1000)}
    assert len(names) == 1000 and all(n.endswith(".parquet") for n in names)


# ----- ingest from S3 into an S3-backed table, then query -----------------------------------

SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "StringType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "id", "type": "LongType"}, {"name": "blob", "type": "ByteArrayType"}],
}
ARROW = pa.schema([("key", pa.string()), ("ts", pa.int64()), ("id", pa.int64()), ("blob", pa.binary())])


def make_rows(n: int, seed: int, first_id: int = 0) -> pa.Table:
    rnd = random.Random(seed)
    return pa.Table.from_pylist([{"key": f"k{rnd.randrange(2000):04d}", "ts": rnd.randrange(100), "id": first_id + i,
                                  "blob": bytes([i % 256, rnd.randrange(256)])} for i in range(n)], schema=ARROW)


def rows(table: pa.Table) -> Counter:
    return Counter(tuple(r.values()) for r in table.to_pylist())


def upload_parquet(client, key: str, table: pa.Table) -> str:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    client.put_object(Bucket=BUCKET, Key=key, Body=buf.getvalue())
    return f"s3://{BUCKET}/{key}"


def upload_csv(client, key: str, table: pa.Table) -> str:
    t = table.set_column(3, "blob", pa.array([base64.b64encode(b).decode() for b in table.column("blob").to_pylist()]))
    buf = io.BytesIO()
    pacsv.write_csv(t, buf)
    client.put_object(Bucket=BUCKET, Key=key, Body=buf.getvalue())
    return f"s3://{BUCKET}/{key}"


def upload_jsonl(client, key: str, table: pa.Table) -> str:
    body = "".join(json.dumps({**r, "blob": base64.b64encode(r["blob"]).decode()}) + "\n" for r in table.to_pylist())
    client.put_object(Bucket=BUCKET, Key=key, Body=body.encode())
    return f"s3://{BUCKET}/{key}"


@pytest.fixture
def s3_sleeper(store):
    s = Sleeper(state_store=InMemoryStateStore(), objects=store)
    yield s
    s.close()


@pytest.mark.parametrize("max_chunk_rows", [4_000_000, 1500], ids=["in-memory", "spilled"])
def test_ingest_of_s3_inputs_into_an_s3_table_answers_queries(s3_sleeper, client, store, request, max_chunk_rows):
    data = make_rows(6000, seed=1)
    prefix = f"input/{request.node.name}"
    paths = [upload_parquet(client, f"{prefix}/a.parquet", data.slice(0, 3000)),
             upload_csv(client, f"{prefix}/b.csv", data.slice(3000, 2000)),
             upload_jsonl(client, f"{prefix}/c.jsonl", data.slice(5000))]
    t = s3_sleeper.create_table("events", SCHEMA, split_points=["k0500", "k1500"])

    result = t.ingest(paths, max_chunk_rows=max_chunk_rows)

    assert result.records == 6000
    state = t.state()
    assert len(state.references) == 3 and sum(r.record_count for r in state.references.values()) == 6000
    in_bucket = set(bucket_keys(client, f"tables/{request.node.name}/{t.info.table_id}/"))
    for ref in state.references.values():
        assert f"tables/{request.node.name}/{ref.filename}" in in_bucket
        assert store.head(sketch_key(ref.filename)) is not None
    all_rows = data.to_pylist()
    everything = t.query(ranges=[("", None)])
    assert rows(everything) == rows(data)
    keys = [(r["key"], r["ts"]) for r in everything.to_pylist()]
    assert keys == sorted(keys)
    probe = all_rows[123]["key"]
    assert rows(t.query(keys=[probe])) == Counter(tuple(r.values()) for r in all_rows if r["key"] == probe)
    ranged = t.query(ranges=[("k0400", "k0600"), ("k1499", "k1501")])
    assert rows(ranged) == Counter(tuple(r.values()) for r in all_rows
                                   if "k0400" <= r["key"] < "k0600" or "k1499" <= r["key"] < "k1501")


def test_ingest_of_a_missing_s3_input_is_refused_and_commits_nothing(s3_sleeper, client, store, request):
    good = upload_parquet(client, f"input/{request.node.name}/good.parquet", make_rows(100, seed=2))
    t = s3_sleeper.create_table("events", SCHEMA)
    with pytest.raises(IngestError, match="missing.parquet"):
        t.ingest([good, f"s3://{BUCKET}/input/{request.node.name}/missing.parquet"])
    assert t.state().files == {}
    assert list(store.list(t.info.table_id)) == []


def test_delete_table_removes_its_objects_from_s3(s3_sleeper, client, store, request):
    t = s3_sleeper.create_table("events", SCHEMA, split_points=["k1000"])
    t.ingest(make_rows(500, seed=3))
    assert len(list(store.list(t.info.table_id))) == 2  # one data file shared by both leaves, and its sketches
    s3_sleeper.delete_table("events")
    assert list(store.list(t.info.table_id)) == []
    assert bucket_keys(client, f"tables/{request.node.name}/{t.info.table_id}/") == []


# ----- maintenance on S3 ----------------------------------------------------------------

def test_split_compaction_and_gc_on_s3_keep_every_record_once(s3_sleeper, client, store, request):
    t = s3_sleeper.create_table("t", SCHEMA, properties={"sleeper.table.partition.splitting.threshold": "1000",
                                                          "sleeper.table.compaction.strategy": "basic"})
    ingested = pa.concat_tables([make_rows(800, seed=i, first_id=i * 10_000) for i in range(3)])
    for i in range(3):
        t.ingest(ingested.slice(i * 800, 800))
    first = t.compact()
    assert first.count("committed") == 1, first.summary()
    assert t.split().splits, "the merged leaf splits at its median"
    report = t.compact()
    assert report.creation.pushed_down == 1 and report.count("failed") == 0, report.summary()
    state = t.state()
    assert {state.partitions[r.partition_id].is_leaf for r in state.references.values()} == {True}
    age_files(s3_sleeper.state_store, t.info.table_id)
    gc = t.gc()
    assert len(gc.deleted) == 3, gc.summary()  # the merged file is still referenced from both children
    assert rows(t.query(ranges=[("", None)])) == rows(ingested)
    live = {r.filename for r in t.state().references.values()}
    prefix = f"tables/{request.node.name}/{t.info.table_id}/data/"
    assert {k.split(f"tables/{request.node.name}/", 1)[1] for k in bucket_keys(client, prefix)
            if k.endswith(".parquet")} == live, "only live files remain in the bucket"


@contextlib.contextmanager
def counted_s3_sleeper(moto_endpoint, request) -> Iterator[tuple[Any, Sleeper]]:
    """A Sleeper over the in-memory state store and this test's folder of the bucket, whose
    S3 requests go through a proxy that logs each one (``proxy.log``: method and path)."""
    from tests.faults.aws_proxy import FaultProxy

    endpoint, _ = moto_endpoint
    with FaultProxy(f"http://{endpoint}") as proxy:
        opts = S3Options(endpoint_override=proxy.url, scheme="http", access_key="test", secret_key="test",
                         region="us-east-1")
        yield proxy, Sleeper(state_store=InMemoryStateStore(),
                             objects=ObjectStore(f"s3://{BUCKET}/tables/{request.node.name}", opts))


def test_a_warm_exact_key_lookup_on_s3_is_one_get_and_a_cold_one_at_most_three_requests(moto_endpoint, request):
    """Counted on the wire (a logging proxy in front of moto): a lookup in a file whose
    footer is cached makes one ranged GET (the reader kept with the footer needs no
    HEAD; the row group's column chunks come in one coalesced read), and the first
    lookup of a file at most three requests (open, footer, row group); a scan streams
    each file in coalesced ranged GETs. Every answer holds its key."""
    from sleeper_ops.io.datafile import ParquetFileCache
    from sleeper_ops.query.runner import QueryRunner, exact_key_region, range_region

    with counted_s3_sleeper(moto_endpoint, request) as (proxy, s):
        schema = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
                  "valueFields": [{"name": "a", "type": "LongType"}, {"name": "b", "type": "StringType"},
                                  {"name": "c", "type": "StringType"}]}
        t = s.create_table("t", schema, split_points=["k05000"],
                           properties={"sleeper.table.parquet.rowgroup.rows.max": "500"})
        n = 10_000
        t.ingest(pa.table({"key": [f"k{i:05d}" for i in range(n)], "a": list(range(n)),
                           "b": [f"b{i}" for i in range(n)], "c": [f"c{i}" for i in range(n)]}))
        runner = QueryRunner(s.state_store, s.objects, t.info, cache=ParquetFileCache())
        try:
            def lookup(i: int) -> list[tuple[str, str]]:
                start = len(proxy.log)
                got = runner.query([exact_key_region(t.schema, [f"k{i:05d}"])])
                assert got.column("key").to_pylist() == [f"k{i:05d}"] and got.column("a").to_pylist() == [i]
                return [(method, path.split("?")[0].rsplit("/", 1)[-1]) for method, path in proxy.log[start:]]

            cold = lookup(10)
            assert len(cold) <= 3 and sum(m == "GET" for m, _ in cold) <= 2, cold
            for i in random.Random(3).sample(range(n // 2), 20):  # the same file (the first leaf), other groups
                warm = lookup(i)
                assert [m for m, _ in warm] == ["GET"], warm
            # a scan streams each file's 10 row groups in coalesced ranged GETs, not one GET per column chunk
            start = len(proxy.log)
            streamed = sum(b.num_rows for b in runner.stream([range_region(t.schema, "k", None)]))
            gets = [m for m, _ in proxy.log[start:] if m == "GET"]
            assert streamed == n and len(gets) <= 2 * len(t.state().references), proxy.log[start:]
        finally:
            runner.close()
            s.close()


def test_a_warm_exact_key_lookup_on_s3_reads_only_the_file_whose_bloom_filter_may_hold_the_key(moto_endpoint,
                                                                                              request):
    """A leaf of three files, each spanning the leaf's keys (three ingests, no compaction):
    the footers' one read per file brings their Bloom filters, so a warm lookup probes them
    in memory and makes one ranged GET, of the file that holds the key, not one per file.
    Counted on the wire; every answer holds its key and only it."""
    from sleeper_ops.io.datafile import ParquetFileCache
    from sleeper_ops.query.runner import QueryRunner, exact_key_region

    with counted_s3_sleeper(moto_endpoint, request) as (proxy, s):
        t = s.create_table("t", {"rowKeyFields": [{"name": "key", "type": "StringType"}],
                                 "valueFields": [{"name": "a", "type": "LongType"}]},
                           properties={"sleeper.table.parquet.rowgroup.rows.max": "500"})
        n = 3_000
        for part in range(3):  # keys interleaved: every file spans the whole key range
            keys = list(range(part, n, 3))
            t.ingest(pa.table({"key": [f"k{i:05d}" for i in keys], "a": keys}))
        assert len(t.state().references) == 3
        runner = QueryRunner(s.state_store, s.objects, t.info, cache=ParquetFileCache())
        try:
            def lookup(i: int) -> list[str]:
                start = len(proxy.log)
                got = runner.query([exact_key_region(t.schema, [f"k{i:05d}"])])
                assert got.column("key").to_pylist() == [f"k{i:05d}"] and got.column("a").to_pylist() == [i]
                return [method for method, _ in proxy.log[start:]]

            cold = lookup(7)
            assert cold.count("HEAD") <= 3 and cold.count("GET") <= 4, cold  # a footer read per file, one row group
            for i in random.Random(5).sample(range(n), 30):
                assert lookup(i) == ["GET"]  # 3 GETs, one a file, without the filters
            start = len(proxy.log)
            # inside every file's key range
            assert runner.query([exact_key_region(t.schema, ["k01500a"])]).num_rows == 0
            assert proxy.log[start:] == [], "a key no file holds is answered from the filters alone"
        finally:
            runner.close()
            s.close()
