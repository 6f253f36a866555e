"""Idempotent client writes on every backend (statestore.client_writes): a write sent
again with its idempotency key stores nothing and gets the first answer (the same
sequence number, the same ingest requests); the key with another body is refused; a
lost reply whose request the backend retried finds its own first write; old keys are
forgotten."""

from __future__ import annotations

import json
from typing import Any

import pytest

from statestore import StateStore
from statestore.client_writes import ClientWrite, IdempotencyKeyReusedError, digest_of
from statestore.clock import now_ms
from statestore.ingest_requests import IngestRequest
from tests.integration.statestore.test_behaviour import new_table


def _write(key: str, data: bytes) -> ClientWrite:
    return ClientWrite(key, digest_of("write", data))


def test_a_repeated_keyed_write_returns_the_first_seq_and_stores_once(store: StateStore) -> None:
    tid = new_table(store)
    first = store.append_buffer(tid, b"abc", 3, client_write=_write("k1", b"abc"))
    other = store.append_buffer(tid, b"xyz", 2)
    again = store.append_buffer(tid, b"abc", 3, client_write=_write("k1", b"abc"))
    assert again == first
    snap = store.read_buffer(tid)
    assert snap.seqs == (first, other) and snap.rows == 5
    record = store.client_write(tid, "k1")
    assert record is not None and record.seq == first


def test_a_key_reused_for_another_body_is_refused_and_stores_nothing(store: StateStore) -> None:
    tid = new_table(store)
    seq = store.append_buffer(tid, b"abc", 3, client_write=_write("k1", b"abc"))
    with pytest.raises(IdempotencyKeyReusedError, match="already used for a different request"):
        store.append_buffer(tid, b"abd", 3, client_write=_write("k1", b"abd"))
    assert store.read_buffer(tid).seqs == (seq,)


def test_keys_are_per_table(store: StateStore) -> None:
    a, b = new_table(store, "a"), new_table(store, "b")
    sa = store.append_buffer(a, b"abc", 3, client_write=_write("k", b"abc"))
    sb = store.append_buffer(b, b"abc", 3, client_write=_write("k", b"abc"))
    assert store.read_buffer(a).seqs == (sa,) and store.read_buffer(b).seqs == (sb,)


def test_a_repeated_keyed_ingest_request_queues_once_and_answers_first(store: StateStore) -> None:
    tid = new_table(store)

    def requests(prefix: str) -> list[IngestRequest]:
        return [IngestRequest(f"{prefix}-{i}", tid, f"/in/f{i}.parquet", 10, 1000) for i in range(3)]

    first = requests("one")
    write = ClientWrite("k", digest_of("ingest-request", b"f0", b"f1", b"f2"),
                        json.dumps([r.to_dict() for r in first]))
    assert store.add_ingest_requests(tid, first, client_write=write) is None
    earlier = store.add_ingest_requests(tid, requests("two"), client_write=write)
    assert earlier is not None and [d["request_id"] for d in json.loads(earlier.answer)] == ["one-0", "one-1", "one-2"]
    assert sorted(r.request_id for r in store.list_ingest_requests(tid)) == ["one-0", "one-1", "one-2"]
    with pytest.raises(IdempotencyKeyReusedError):
        store.add_ingest_requests(tid, requests("three"), client_write=ClientWrite("k", "other digest"))
    assert len(store.list_ingest_requests(tid)) == 3


def test_pruning_forgets_old_keys_only(store: StateStore) -> None:
    tid = new_table(store)
    store.append_buffer(tid, b"abc", 3, client_write=_write("old", b"abc"))
    assert store.prune_client_writes(tid, now_ms() - 3_600_000) == 0
    assert store.client_write(tid, "old") is not None
    assert store.prune_client_writes(tid, now_ms() + 1) == 1
    assert store.client_write(tid, "old") is None
    # forgotten: the key stores a new write
    store.append_buffer(tid, b"abc", 3, client_write=_write("old", b"abc"))
    assert store.buffer_stats(tid).entries == 2


class _RetriedAfterLostReply:
    """A boto3 client whose TransactWriteItems is sent twice, as botocore does when the
    first reply is lost: the first applies, the caller sees only the second's answer."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def transact_write_items(self, **kwargs: Any) -> Any:
        self._client.transact_write_items(**kwargs)
        self.lost += 1
        return self._client.transact_write_items(**kwargs)


@pytest.mark.parametrize("store", [pytest.param("dynamodb", marks=pytest.mark.integration)], indirect=True)
@pytest.mark.parametrize("size", [10, 400 * 1024], ids=["inline", "blob"])
def test_dynamodb_keyed_write_whose_reply_was_lost_finds_its_own_write(store: StateStore, size: int) -> None:
    tid = new_table(store)
    data = b"x" * size
    d = store._dynamo  # type: ignore[attr-defined]
    real = d.client
    d.client = retried = _RetriedAfterLostReply(real)
    try:
        seq = store.append_buffer(tid, data, 7, client_write=_write("lost", data))
    finally:
        d.client = real
    assert retried.lost == 1
    snap = store.read_buffer(tid)
    assert snap.seqs == (seq,) and snap.rows == 7
    assert snap.entries[0].data == data  # a blob entry still has its blob


@pytest.mark.parametrize("store", [pytest.param("dynamodb", marks=pytest.mark.integration)], indirect=True)
def test_dynamodb_keyed_ingest_request_whose_reply_was_lost_queues_once(store: StateStore) -> None:
    tid = new_table(store)
    first = [IngestRequest(f"r-{i}", tid, f"/in/f{i}.parquet", 10, 1000) for i in range(3)]
    write = ClientWrite("lost", digest_of("ingest-request", b"f"), json.dumps([r.to_dict() for r in first]))
    d = store._dynamo  # type: ignore[attr-defined]
    real = d.client
    d.client = retried = _RetriedAfterLostReply(real)
    try:
        earlier = store.add_ingest_requests(tid, first, client_write=write)
    finally:
        d.client = real
    assert retried.lost == 1
    assert earlier is not None and earlier.answer == write.answer  # its own first attempt, found
    assert sorted(r.request_id for r in store.list_ingest_requests(tid)) == ["r-0", "r-1", "r-2"]


# ----- a key kept with a commit (deletes, ingests, exports, bulk imports: DESIGN.md section 12) -----
def _delete(lo: int) -> Any:
    from statestore import DeleteRecords, Range, Region
    return DeleteRecords((Region((Range("key", lo, lo + 10),)),))


def test_a_keyed_commit_applies_once_and_a_repeat_answers_its_first_number(store: StateStore) -> None:
    tid = new_table(store)
    store.commit(tid, _delete(0))  # tombstone 1, unkeyed
    write = ClientWrite("erase-7", digest_of("delete", b"10..20"))
    assert store.commit(tid, _delete(10), client_write=write) is True
    assert store.commit(tid, _delete(10), client_write=write) is False  # the same request again
    state = store.load_state(tid)
    assert state.delete_count == 2 and sorted(state.tombstones) == [1, 2]
    record = store.client_write(tid, "erase-7")
    assert record is not None and record.seq == 2 and record.digest == write.digest


def test_a_commit_key_reused_for_another_request_is_refused_and_applies_nothing(store: StateStore) -> None:
    tid = new_table(store)
    store.commit(tid, _delete(10), client_write=ClientWrite("erase-7", digest_of("delete", b"10..20")))
    with pytest.raises(IdempotencyKeyReusedError, match="'erase-7' was already used for a different request"):
        store.commit(tid, _delete(50), client_write=ClientWrite("erase-7", digest_of("delete", b"50..60")))
    assert store.load_state(tid).delete_count == 1
    # a buffered write with a key a commit holds is refused too: one key names one request
    with pytest.raises(IdempotencyKeyReusedError):
        store.append_buffer(tid, b"abc", 3, client_write=_write("erase-7", b"abc"))
    assert store.buffer_stats(tid).entries == 0


def test_a_claimed_key_is_kept_alone_and_answers_its_first_claim(store: StateStore) -> None:
    """A write whose commit point is not in the state store (an export) keeps its key alone."""
    tid = new_table(store)
    first = ClientWrite("daily", digest_of("export", b"s3://a"), answer="s3://a")
    assert store.claim_client_write(tid, first) is None
    again = store.claim_client_write(tid, first)
    assert again is not None and again.answer == "s3://a"
    with pytest.raises(IdempotencyKeyReusedError, match="'daily'"):
        store.claim_client_write(tid, ClientWrite("daily", digest_of("export", b"s3://b"), answer="s3://b"))
    assert store.list_ingest_requests(tid) == []


def test_keyed_commits_racing_with_one_key_apply_once(store: StateStore) -> None:
    """Four committers send one key at once, two requests: one applies; the others of its
    request answer False, those of the other request are refused (PostgreSQL: the key's
    read and insert in one serializable commit; DynamoDB: the key item's condition)."""
    import threading

    tid = new_table(store)
    writes = [ClientWrite("race", digest_of("delete", b"a")), ClientWrite("race", digest_of("delete", b"b"))]
    outcomes: list[object] = []
    barrier = threading.Barrier(4)

    def go(i: int) -> None:
        barrier.wait(10)
        try:
            outcomes.append((i % 2, store.commit(tid, _delete(10 * (i % 2)), client_write=writes[i % 2])))
        except IdempotencyKeyReusedError:
            outcomes.append((i % 2, "refused"))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert store.load_state(tid).delete_count == 1
    winner = next(w for w, o in outcomes if o is True)
    assert sorted(o for w, o in outcomes if w == winner) == [False, True]  # type: ignore[type-var]
    assert [o for w, o in outcomes if w != winner] == ["refused", "refused"]
