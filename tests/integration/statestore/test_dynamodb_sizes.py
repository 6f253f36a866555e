"""DynamoDB's size limits, counted on every attribute a commit stores (DESIGN.md section
12): a large delete's log item (body and summary) fits the 400 KB item limit or is
refused once before anything is written, and in group commit one request that DynamoDB
rejects gets a refusal of its own while the rest of the batch commits (issue 33,
finding 2)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from sleeper_ops.maintenance.deletes import delete_regions
from statestore import AddFiles, FileReference, Schema, partitions_from_split_points
from statestore.bookkeeping import Bookkeeping
from statestore.dynamodb import open_dynamodb
from statestore.dynamodb.connection import get_s, s
from statestore.dynamodb.contention import Contention
from statestore.dynamodb.group_batch import pending_item
from statestore.dynamodb.log import EncodedTransaction
from statestore.errors import TransactionError
from statestore.transactions import DeleteRecords
from tests.integration.statestore.conftest import dynamodb_options

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}],
                           "valueFields": [{"name": "value", "type": "StringType"}]})
#: UUID keys: a delete of 5,000 has a ~43 KB body but a ~470 KB history summary
KEYS = [str(uuid.UUID(int=i * 7919 + 12345)) for i in range(5000)]


@pytest.fixture
def options(moto_endpoint_url: str, tmp_path: Path) -> dict[str, Any]:
    return dynamodb_options(moto_endpoint_url, tmp_path / "blobs")


def _table(store: Any) -> tuple[str, str]:
    tid = store.create_table(f"t{uuid.uuid4().hex[:6]}", SCHEMA, partitions_from_split_points(SCHEMA, [])).table_id
    return tid, store.partitions(tid)[0].id


def _leftovers(store: Any, tid: str) -> list[str]:
    return [it["sk"]["S"] for it in store._dynamo.query("leftovers", "requests", "table_id = :t", {":t": s(tid)})]


@pytest.mark.parametrize("group_commit", [False, True])
def test_a_delete_of_5000_uuid_keys_commits_and_its_history_gives_its_digest(options, group_commit, monkeypatch):
    """The log item counts its summary: a delete whose full detail text would be ~470 KB
    commits (alone, and through a group commit's leader), and ``history`` says how many
    regions it deleted and their digest, never the keys (ADR 0015)."""
    if group_commit:
        monkeypatch.setattr(Contention, "active", lambda self, table_id: True)
    store = open_dynamodb(**options, group_commit=group_commit)
    tid, _ = _table(store)
    assert store.commit(tid, DeleteRecords(delete_regions(SCHEMA, keys=KEYS))) is True
    fresh = open_dynamodb(**options)
    state = fresh.load_state(tid)
    assert state.delete_count == 1 and len(state.tombstones[1].regions) == 5000
    detail = fresh.history(tid, limit=1)[0].detail or ""
    assert detail.startswith("delete 1: 5000 regions of key") and "sha256" in detail, detail[:80]
    assert not any(k in detail for k in KEYS), detail[:80]
    assert fresh.transaction_number(tid) == 2
    assert _leftovers(store, tid) == []


def test_a_large_delete_pending_beside_other_committers_blocks_none_of_them(options, monkeypatch):
    """r7: the owner of a delete of 5,000 UUID keys put its request and died. The other
    committers' leaders log it with theirs (its summary fits now); every commit applies
    once, and GC's prune leaves nothing pending."""
    monkeypatch.setattr(Contention, "active", lambda self, table_id: True)
    setup = open_dynamodb(**options)
    tid, leaf = _table(setup)
    big = DeleteRecords(delete_regions(SCHEMA, keys=KEYS))
    enc = EncodedTransaction.of(tid, big, setup._blobs)
    requests = setup.commits.group.requests
    requests.put_pending(pending_item(tid, enc, Bookkeeping(uuid.uuid4().hex, None, None), None, uuid.uuid4().hex,
                                      int(time.time() * 1000) - 10), "big delete")
    others = [open_dynamodb(**options) for _ in range(2)]
    for i, other in enumerate(others):
        other.outcome_timeout_seconds = 20
        assert other.commit(tid, AddFiles((FileReference(f"f{i}.parquet", leaf, 10),))) is True
    state = open_dynamodb(**options).load_state(tid)
    assert sorted(state.files) == ["f0.parquet", "f1.parquet"]
    assert sum(r.record_count for r in state.references.values()) == 20
    assert state.delete_count == 1 and len(state.tombstones[1].regions) == 5000
    assert setup.transaction_number(tid) == 4
    setup.prune_commit_ids(tid, int(time.time() * 1000) + 1)
    assert _leftovers(setup, tid) == []


def _reject(store: Any, marker: str) -> list[int]:
    """Make DynamoDB reject (ValidationException, 400) every TransactWriteItems of
    ``store`` that logs commit id ``marker``, as it rejects an item over 400 KB; returns
    a list that counts the rejections."""
    real = store._dynamo.client.transact_write_items
    rejected: list[int] = []

    def transact_write_items(**kwargs: Any) -> Any:
        if any(get_s(it.get("Put", {}).get("Item", {}), "commit_id") == marker for it in kwargs["TransactItems"]):
            rejected.append(1)
            raise botocore.exceptions.ClientError(
                {"Error": {"Code": "ValidationException", "Message": "Item size has exceeded the maximum allowed size"},
                 "ResponseMetadata": {"HTTPStatusCode": 400}}, "TransactWriteItems")
        return real(**kwargs)

    store._dynamo.client.transact_write_items = transact_write_items
    return rejected


def test_a_request_dynamodb_rejects_is_refused_alone_and_the_others_commit(options, monkeypatch):
    """r7's scenario: a request whose items DynamoDB rejects is pending beside other
    committers. The leaders give it a refused verdict of its own, once; every other
    commit applies; nothing stays pending."""
    monkeypatch.setattr(Contention, "active", lambda self, table_id: True)
    setup = open_dynamodb(**options)
    tid, leaf = _table(setup)
    poison = DeleteRecords(delete_regions(SCHEMA, keys=KEYS[:10]))
    poison_id = uuid.uuid4().hex
    enc = EncodedTransaction.of(tid, poison, setup._blobs)
    # its owner put it and died (or still waits): another store's leader must decide it
    requests = setup.commits.group.requests
    requests.put_pending(pending_item(tid, enc, Bookkeeping(poison_id, None, None), None, uuid.uuid4().hex,
                                      int(time.time() * 1000) - 10), "poison")
    committers = [open_dynamodb(**options) for _ in range(3)]
    for c in committers:
        c.outcome_timeout_seconds = 20
    rejections = [_reject(c, poison_id) for c in committers]
    errors: list[BaseException] = []

    def commit(i: int) -> None:
        try:
            for j in range(2):
                assert committers[i].commit(tid, AddFiles((FileReference(f"f{i}-{j}.parquet", leaf, 10),))) is True
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(3)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert time.monotonic() - t0 < 15
    state = open_dynamodb(**options).load_state(tid)
    assert sorted(state.files) == sorted(f"f{i}-{j}.parquet" for i in range(3) for j in range(2))
    assert sum(r.record_count for r in state.references.values()) == 60
    assert state.delete_count == 0
    verdicts = list(setup._dynamo.query("v", "requests", "table_id = :t", {":t": s(tid)}))
    assert [(it["sk"]["S"], get_s(it, "kind"), get_s(it, "error")) for it in verdicts] == [
        (f"x#{poison_id}", "refused", "TransactionError")]
    assert "rejected" in (get_s(verdicts[0], "message") or "") and tid in (get_s(verdicts[0], "message") or "")
    # each leader meets it at most twice: in a batch, then alone (then it is refused)
    assert 1 <= sum(len(r) for r in rejections) <= 2 * len(committers)


def test_a_lone_commit_dynamodb_rejects_is_a_definite_refusal(options):
    """A single commit whose items DynamoDB rejects raises a TransactionError naming
    the table (a definite no: nothing applied), not StateStoreUnavailableError."""
    store = open_dynamodb(**options, group_commit=False)
    tid, leaf = _table(store)
    _reject(store, "a-rejected-commit")
    with pytest.raises(TransactionError, match=f"table {tid}.*rejected"):
        store.commit(tid, AddFiles((FileReference("rejected.parquet", leaf, 10),)), commit_id="a-rejected-commit")
    assert store.load_state(tid).files == {}
    assert store.transaction_number(tid) == 1


def test_a_pending_request_no_leader_can_read_is_refused_alone_and_gc_prunes_it(options, monkeypatch, tmp_path):
    """A request whose item cannot be decoded (a malformed body) pending beside other
    committers: it gets a refused verdict of its own, every other commit applies, and
    GC's run (its own commit and the prune) leaves nothing pending."""
    from sleeper_ops.io.storage import ObjectStore
    from sleeper_ops.maintenance.gc import collect_garbage

    monkeypatch.setattr(Contention, "active", lambda self, table_id: True)
    setup = open_dynamodb(**options)
    tid, leaf = _table(setup)
    bad_id = uuid.uuid4().hex
    requests = setup.commits.group.requests
    requests.put_pending(pending_item(tid, EncodedTransaction("add_files", b"not a compressed body", None),
                                      Bookkeeping(bad_id, None, None), None, uuid.uuid4().hex,
                                      int(time.time() * 1000) - 10), "a malformed request")
    others = [open_dynamodb(**options) for _ in range(2)]
    for i, other in enumerate(others):
        other.outcome_timeout_seconds = 20
        assert other.commit(tid, AddFiles((FileReference(f"f{i}.parquet", leaf, 10),))) is True
    verdicts = list(setup._dynamo.query("v", "requests", "table_id = :t", {":t": s(tid)}))
    assert [(it["sk"]["S"], get_s(it, "kind")) for it in verdicts] == [(f"x#{bad_id}", "refused")]
    assert "cannot be read" in (get_s(verdicts[0], "message") or "")
    table = setup.list_tables()[0]
    report = collect_garbage(setup, ObjectStore(str(tmp_path / "data")), table,
                             now_ms=int(time.time() * 1000) + 2 * 86_400_000)
    assert report.skipped_reason is None
    assert _leftovers(setup, tid) == []
    state = open_dynamodb(**options).load_state(tid)
    assert sorted(state.files) == ["f0.parquet", "f1.parquet"]
    assert sum(r.record_count for r in state.references.values()) == 20
