"""The proof of erasure on the real backends (issue 33): PostgreSQL (the embedded pool)
and DynamoDB (moto). The state store's own records holding a delete's keys are listed
with when they age out -- the undo of the tombstone's drop in PostgreSQL's history, the
delete's log item and the snapshots holding its tombstone on DynamoDB -- and once the
delete is purged and past the history retention, the report is clean; a stray DynamoDB
buffer blob (one no entry names) holding records is listed until it is gone."""

from __future__ import annotations

import time
from typing import Iterator

import pyarrow as pa
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from tests.integration.statestore.conftest import dynamodb_options, serial_moto_server

pytestmark = pytest.mark.integration

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}], "sortKeyFields": [],
          "valueFields": [{"name": "v", "type": "StringType"}]}
HOUR = 3_600_000
RETENTION_HOURS = 48  # longer than the 24 h settle before a spent tombstone is dropped


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with pytest.MonkeyPatch.context() as mp, serial_moto_server() as url:
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield url


@pytest.fixture(params=["postgres", "dynamodb"])
def sleeper(request, tmp_path):  # type: ignore[no-untyped-def]
    if request.param == "postgres":
        from statestore.postgres import PostgresStateStore

        store = PostgresStateStore(request.getfixturevalue("pg_dsn"))
    else:
        from statestore.dynamodb import open_dynamodb

        # a snapshot every commit and no extra margins, so expiry follows the history retention alone
        store = open_dynamodb(**dynamodb_options(request.getfixturevalue("moto"), tmp_path / "blobs"),
                              snapshot_every=1, retention_margin=0, retention_seconds=0)
    with Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data"))) as s:
        yield request.param, s


def test_the_records_holding_a_deletes_keys_are_listed_until_purge_and_retention_take_them(sleeper) -> None:  # type: ignore[no-untyped-def]
    backend, s = sleeper
    t = s.create_table("t", SCHEMA, properties={"sleeper.table.delete.purge.hours": "0",
                                                "sleeper.table.history.retention.minutes": str(RETENTION_HOURS * 60)})
    t.ingest(pa.table({"key": ["alice@x.org", "bob@x.org", "carol@x.org"], "v": ["a", "b", "c"]}))
    t.delete(keys=["alice@x.org"])
    assert "alice" not in repr([h.detail for h in t.history(5)])  # the history detail keeps a digest only
    t.compact(runner="local")
    now = int(time.time() * 1000)
    t.gc(now_ms=now + 25 * HOUR)  # past the settle time: the spent tombstone is dropped, the history kept
    assert not t.state().tombstones
    report = t.erasure_report(keys=["alice@x.org"], now_ms=now + 25 * HOUR)
    records = [h for h in report.held if h.kind == "state store record"]
    # the replaced file stays for the retention too (an --as-of read before the delete still reads it)
    assert {h.kind for h in report.held} == {"file awaiting GC", "state store record"}, report.render()
    if backend == "postgres":
        assert [h.name.split(" (")[0] for h in records] == [f"history row of transaction {t.history(1)[0].number}"]
    else:
        assert any(h.name.startswith("log item ") and "a delete's body" in h.name for h in records)
        assert any(h.name.startswith("snapshot ") for h in records)
    dated = [h for h in records if h.goes_ms is not None]
    assert dated and all(now < h.goes_ms <= now + (RETENTION_HOURS + 1) * HOUR for h in dated), report.render()
    assert "history retention" in report.render() or "history.retention.minutes" in report.render()
    later = now + 25 * HOUR + (RETENTION_HOURS + 1) * HOUR
    t.gc(now_ms=later)
    after = t.erasure_report(keys=["alice@x.org"], now_ms=later)
    assert after.clean, after.render()
    assert sorted(t.query(ranges=[("", None)])["key"].to_pylist()) == ["bob@x.org", "carol@x.org"]


def test_a_stray_dynamodb_buffer_blob_is_listed_until_it_is_gone(moto, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from statestore.dynamodb import open_dynamodb

    store = open_dynamodb(**dynamodb_options(moto, tmp_path / "blobs"))
    with Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data"))) as s:
        t = s.create_table("t", SCHEMA)
        rows = pa.table({"key": [f"k{i:05d}" for i in range(3000)], "v": ["v" * 200] * 3000})
        t.write(rows)  # over the inline limit: the entry's bytes go to a blob
        named = [k for k, _ in store._blobs.list(f"{t.info.table_id}/buffer/")]
        assert len(named) == 1
        data = store._blobs.get(named[0])
        # a copy no entry names, as a flush whose reply was lost or a failed delete leaves one
        stray = f"{t.info.table_id}/buffer/999-{'0' * 32}.arrow"
        store._blobs.put(stray, data)
        t.flush()
        t.delete(ranges=[("k00000", "k00010")])
        t.compact(runner="local")
        report = t.erasure_report(ranges=[("k00000", "k00010")])
        blobs = [(h.kind, h.name, h.rows) for h in report.held if h.kind == "buffer blob"]
        assert blobs == [("buffer blob", stray, 10)], report.render()
        assert "no entry names" in report.render()
        store._blobs.delete([stray])
        assert not [h for h in t.erasure_report(ranges=[("k00000", "k00010")]).held if h.kind == "buffer blob"]
        assert t.query(ranges=[("", None)]).num_rows == 2990


def test_a_pending_group_commit_request_of_a_delete_is_listed_until_decided_or_pruned(moto, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from statestore import DeleteRecords, Range, Region
    from statestore.bookkeeping import Bookkeeping
    from statestore.dynamodb import open_dynamodb
    from statestore.dynamodb.group_batch import REQUESTS, pending_item
    from statestore.dynamodb.log import EncodedTransaction
    from statestore.store import COMMIT_ID_RETENTION_MS

    store = open_dynamodb(**dynamodb_options(moto, tmp_path / "blobs"))
    with Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data"))) as s:
        t = s.create_table("t", SCHEMA)
        tid = t.info.table_id
        txn = DeleteRecords((Region((Range("key", "alice@x.org", "alice@x.org\x00"),)),))
        t_ms = int(time.time() * 1000) - 3_000  # its owner gave up (a request stuck behind a failing batch)
        item = pending_item(tid, EncodedTransaction.of(tid, txn, store._blobs), Bookkeeping("c-1"), None, "nonce", t_ms)
        store._dynamo.client.put_item(TableName=store._dynamo.table(REQUESTS), Item=item)
        report = t.erasure_report(keys=["alice@x.org"])
        assert [(h.kind, h.name) for h in report.held] == [
            ("state store record", "pending commit request p#c-1 (a delete's body)")], report.render()
        assert report.held[0].goes_ms == t_ms + COMMIT_ID_RETENTION_MS
        t.gc(now_ms=t_ms + COMMIT_ID_RETENTION_MS + HOUR)  # GC prunes abandoned requests
        assert t.erasure_report(keys=["alice@x.org"]).clean


def test_a_stray_delete_body_is_listed_and_one_a_pending_request_names_is_not(moto, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    import zlib

    from statestore import DeleteRecords, Range, Region
    from statestore.bookkeeping import Bookkeeping
    from statestore.dynamodb import open_dynamodb
    from statestore.dynamodb.group_batch import REQUESTS, pending_item
    from statestore.dynamodb.log import EncodedTransaction

    store = open_dynamodb(**dynamodb_options(moto, tmp_path / "blobs"))
    with Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data"))) as s:
        t = s.create_table("t", SCHEMA)
        tid = t.info.table_id
        txn = DeleteRecords((Region((Range("key", "alice@x.org", "alice@x.org\x00"),)),))
        body = zlib.compress(json.dumps(txn.to_dict()).encode())
        stray, named = f"transactions/{tid}/stray.json.z", f"transactions/{tid}/named.json.z"
        store._blobs.put(stray, body)  # a failed commit's spilled body
        store._blobs.put(named, body)  # the spilled body of a request still pending
        item = pending_item(tid, EncodedTransaction(txn.TYPE, None, named), Bookkeeping("c-2"), None, "nonce",
                            int(time.time() * 1000))
        store._dynamo.client.put_item(TableName=store._dynamo.table(REQUESTS), Item=item)
        held = [h.name for h in t.erasure_report(keys=["alice@x.org"]).held]
        assert held == ["pending commit request p#c-2 (a delete's body)", f"stray blob {stray}"], held
        store._blobs.delete([stray])
        held = [h.name for h in t.erasure_report(keys=["alice@x.org"]).held]
        assert held == ["pending commit request p#c-2 (a delete's body)"], held
