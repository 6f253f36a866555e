"""What only the DynamoDB state store has (the behaviour suites run on it through the
``store`` fixture): snapshots plus the tail, catching up, retention, large bodies in
the object store (S3 on moto), a lost reply, and real processes and threads racing
commits through the conditional log write -- each thread with a store of its own, so
the race is DynamoDB's, not a lock's."""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import boto3
import botocore.exceptions
import pytest

from statestore import (
    AddFiles,
    AssignJobIds,
    FileReference,
    FileReferenceError,
    JobAssignment,
    ReplaceFileReferences,
    Schema,
    SplitPartition,
    TransactionError,
    partitions_from_split_points,
)
from statestore.dynamodb import DynamoDBStateStore, open_dynamodb
from statestore.dynamodb.blobs import LocalBlobStore
from statestore.dynamodb.log import EncodedTransaction
from statestore.errors import PartitionError
from statestore.partitions import split_children
from tests.integration.statestore.conftest import MOTO_CREDENTIALS, dynamodb_options

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}]})
BUCKET = "sleeper-statestore"


@pytest.fixture
def options(moto_endpoint_url: str, tmp_path: Path) -> dict[str, Any]:
    """Tables of this test's own; snapshots and large bodies in a local directory."""
    return dynamodb_options(moto_endpoint_url, tmp_path / "blobs")


@pytest.fixture
def s3_options(moto_endpoint_url: str, options: dict[str, Any]) -> dict[str, Any]:
    """As ``options``, with snapshots and large bodies in S3 (moto)."""
    s3 = boto3.client("s3", endpoint_url=moto_endpoint_url, aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    try:
        s3.create_bucket(Bucket=BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    prefix = options["table_prefix"].rstrip("-")
    return {**options, "object_store": f"s3://{BUCKET}/{prefix}", "object_store_options": {
        "endpoint_url": moto_endpoint_url, **MOTO_CREDENTIALS}}


def refs(prefix: str, n: int, leaves: list[str]) -> tuple[FileReference, ...]:
    return tuple(FileReference(f"{prefix}/{i:06d}.parquet", leaves[i % len(leaves)], i) for i in range(n))


def new_table(store: DynamoDBStateStore, name: str = "t", splits: tuple[str, ...] = ("g", "n", "t")) -> tuple[
        str, list[str]]:
    parts = partitions_from_split_points(SCHEMA, list(splits))
    return store.create_table(name, SCHEMA, parts).table_id, sorted(p.id for p in parts if p.is_leaf)


def test_a_new_reader_loads_the_newest_snapshot_plus_the_tail(s3_options):
    writer = open_dynamodb(**s3_options, snapshot_every=5)
    tid, leaves = new_table(writer)
    for c in range(12):
        writer.commit(tid, AddFiles(refs(f"c{c}", 3, leaves)))
    listed = boto3.client("s3", endpoint_url=s3_options["object_store_options"]["endpoint_url"],
                          aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")
    keys = [o["Key"] for o in listed.list_objects_v2(Bucket=BUCKET, Prefix=s3_options["object_store"].split("/", 3)[3]
                                                     ).get("Contents", [])]
    assert len([k for k in keys if "/snapshots/" in k]) == 2  # after transactions 5 and 10 (1 creates the table)
    reader = open_dynamodb(**s3_options)
    assert reader.load_state(tid).canonical() == writer.load_state(tid).canonical()
    assert reader._cache.entry(tid).snapshot_n == 10


def test_a_store_holding_a_state_catches_up_with_other_writers_and_their_large_bodies(s3_options, tmp_path):
    a, b = open_dynamodb(**s3_options), open_dynamodb(**s3_options)
    tid, leaves = new_table(a)
    a.commit(tid, AddFiles(refs("first", 2, leaves)))
    assert len(b.load_state(tid).files) == 2
    big = AddFiles(tuple(FileReference(f"big/{uuid.uuid4().hex}.parquet", leaves[i % 4], i) for i in range(30_000)))
    a.commit(tid, big)
    item = a._dynamo.get("read", "log", {"table_id": {"S": tid}, "n": {"N": "3"}})
    assert item is not None and "body_key" in item and "body" not in item
    assert len(EncodedTransaction.of(tid, big, LocalBlobStore(tmp_path)).body or b"") == 0  # over INLINE_LIMIT
    state = b.load_state(tid)
    assert len(state.files) == 30_002 and b._cache.entry(tid).n == 3
    assert state.canonical() == a.load_state(tid).canonical()


def test_retention_removes_old_transactions_and_snapshots_and_stale_readers_reload(options):
    writer = open_dynamodb(**options, snapshot_every=4, retention_margin=2, retention_seconds=0)
    tid, leaves = new_table(writer)
    stale = open_dynamodb(**options)
    stale.load_state(tid)  # holds the state after transaction 1
    for c in range(13):
        writer.commit(tid, AddFiles(refs(f"c{c}", 2, leaves)))
    removed_log, removed_snapshots = writer.expire(tid, now_ms=2**62)
    assert removed_snapshots == 2  # those at 4 and 8; the one at 12 stays
    assert removed_log == 10  # transactions 1..10 (12 - margin 2)
    remaining = writer._dynamo.query("read", "log", "table_id = :t", {":t": {"S": tid}})
    assert [int(i["n"]["N"]) for i in remaining] == [11, 12, 13, 14]
    assert stale.load_state(tid).canonical() == writer.load_state(tid).canonical()  # found the gap, reloaded
    assert open_dynamodb(**options).load_state(tid).canonical() == writer.load_state(tid).canonical()


def test_a_commit_whose_reply_was_lost_applies_once(options, monkeypatch):
    store = open_dynamodb(**options)
    tid, leaves = new_table(store)
    client = store._dynamo.client
    real = client.transact_write_items
    calls = []

    def lose_first_reply(**kwargs: Any) -> Any:
        out = real(**kwargs)
        calls.append(1)
        if len(calls) == 1:
            raise botocore.exceptions.ReadTimeoutError(endpoint_url="moto")
        return out

    monkeypatch.setattr(client, "transact_write_items", lose_first_reply)
    assert store.commit(tid, AddFiles(refs("once", 3, leaves))) is False  # applied by the try whose reply was lost
    monkeypatch.setattr(client, "transact_write_items", real)
    fresh = open_dynamodb(**options)
    assert sorted(fresh.load_state(tid).files) == [f"once/{i:06d}.parquet" for i in range(3)]
    assert fresh._cache.entry(tid).n == 2


WORKERS, COMMITS, FILES = 8, 8, 10


def test_processes_adding_files_at_once_lose_and_duplicate_nothing(options, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # spawned workers import their module by name
    from dynamodb_workers import add_files_worker

    store = open_dynamodb(**options)
    tid, leaves = new_table(store, "busy")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=add_files_worker, args=(options, tid, leaves, w, COMMITS, FILES, barrier, results))
             for w in range(WORKERS)]
    for p in procs:
        p.start()
    outcomes = []
    try:
        for _ in procs:
            outcomes.append(results.get(timeout=240))
    except queue.Empty:
        pytest.fail(f"workers did not finish; got {outcomes}")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    errors = [o for o in outcomes if o[0] != "ok"]
    assert not errors, errors[0][2]
    assert sum(o[2] for o in outcomes) > 0, "the workers never raced"

    expected = {(f"w{w}/c{c}/f{i}.parquet", leaves[(c + i) % len(leaves)])
                for w in range(WORKERS) for c in range(COMMITS) for i in range(FILES)}
    got = [(r.filename, r.partition_id) for r in open_dynamodb(**options).file_references(tid)]
    assert len(got) == len(set(got)), "a reference is present twice"
    assert set(got) == expected, f"{len(expected - set(got))} references missing"
    assert len(store.load_state(tid).files) == WORKERS * COMMITS * FILES
    assert store._cache.entry(tid).n == 1 + WORKERS * COMMITS


def race(stores: list[DynamoDBStateStore], attempt: Callable[[DynamoDBStateStore, int], None]) -> list[
        BaseException | None]:
    """Run ``attempt(store, i)`` in one thread per store, released together."""
    barrier = threading.Barrier(len(stores))
    outcome: list[BaseException | None] = [None] * len(stores)

    def run(i: int) -> None:
        barrier.wait()
        try:
            attempt(stores[i], i)
        except BaseException as e:
            outcome[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a committer hung"
    return outcome


def test_stores_racing_to_commit_one_compaction_job_let_exactly_one_win(options):
    stores = [open_dynamodb(**options) for _ in range(8)]
    tid, leaves = new_table(stores[0], "compacted", ("m",))
    leaf = leaves[0]
    for s in stores:
        s.load_state(tid)
    for round_ in range(3):
        inputs = tuple(f"r{round_}/in{i}" for i in range(3))
        stores[0].commit(tid, AddFiles(tuple(FileReference(f, leaf, 10) for f in inputs)))
        stores[0].commit(tid, AssignJobIds((JobAssignment(f"job{round_}", leaf, inputs),)))

        def commit(store: DynamoDBStateStore, i: int, inputs: tuple[str, ...] = inputs, r: int = round_) -> None:
            store.commit(tid, ReplaceFileReferences(f"job{r}", leaf, inputs, FileReference(f"r{r}/out{i}", leaf, 30)))

        outcome = race(stores, commit)
        winners = [i for i, e in enumerate(outcome) if e is None]
        assert len(winners) == 1, outcome
        assert all(isinstance(e, FileReferenceError) for e in outcome if e is not None), outcome
        state = stores[-1].load_state(tid)
        assert {f for f in state.files if f.startswith(f"r{round_}/out")} == {f"r{round_}/out{winners[0]}"}
        assert not any(state.reference_count(f) for f in inputs)


def test_stores_racing_to_split_one_partition_let_exactly_one_win(options):
    stores = [open_dynamodb(**options) for _ in range(6)]
    parts = partitions_from_split_points(SCHEMA)
    tid = stores[0].create_table("split", SCHEMA, parts).table_id
    root = parts[0]

    def split(store: DynamoDBStateStore, i: int) -> None:
        store.commit(tid, SplitPartition(*split_children(root, 0, f"k{i}", f"left{i}", f"right{i}")))

    outcome = race(stores, split)
    winners = [i for i, e in enumerate(outcome) if e is None]
    assert len(winners) == 1 and all(isinstance(e, PartitionError) for e in outcome if e is not None), outcome
    assert set(stores[0].load_state(tid).partitions) == {root.id, f"left{winners[0]}", f"right{winners[0]}"}
    assert all(isinstance(e, TransactionError) for e in outcome if e is not None)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_blob_store_lists_the_whole_objects_under_a_prefix(where, s3_options, tmp_path):
    from statestore.dynamodb.blobs import open_blob_store

    loc = s3_options["object_store"] if where == "s3" else tmp_path / "blobs"
    blobs = open_blob_store(loc, **(s3_options["object_store_options"] if where == "s3" else {}))
    for k in ("t1/buffer/2-b.arrow", "t1/buffer/1-a.arrow", "t1/bodies/x.json.zst", "t2/buffer/1-c.arrow"):
        blobs.put(k, b"x")
    if where == "local":
        (tmp_path / "blobs" / "t1" / "buffer" / ".tmp-half").write_bytes(b"half")  # a put under way
    listed = blobs.list("t1/buffer/")
    assert [k for k, _ in listed] == ["t1/buffer/1-a.arrow", "t1/buffer/2-b.arrow"]
    assert all(abs(ms - time.time() * 1000) < 120_000 for _, ms in listed)
    assert [k for k, _ in blobs.list("t1/")] == ["t1/bodies/x.json.zst", "t1/buffer/1-a.arrow",
                                                  "t1/buffer/2-b.arrow"]
    assert blobs.list("t3/") == []
