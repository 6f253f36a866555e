"""Tombstones (issue 22, :mod:`statestore.deletes`) on every backend: a delete is one
transaction that numbers its tombstone, file references keep the delete horizon their
writer saw through every later transaction, readers of changes learn of new and
dropped tombstones, and a DynamoDB snapshot keeps them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from statestore import (
    AddFiles,
    AssignJobIds,
    DeleteRecords,
    DropTombstones,
    FileReference,
    JobAssignment,
    Range,
    Region,
    ReplaceFileReferences,
    SplitFileReference,
    SplitFileReferences,
    StateStore,
    TransactionError,
)
from tests.integration.statestore.test_behaviour import new_table

KEYS = Region((Range("key", 10, 20),))


def test_a_delete_numbers_its_tombstone_and_the_count_outlives_a_drop(store: StateStore):
    tid = new_table(store)
    store.commit(tid, DeleteRecords((KEYS,), "ts > 5", buffer_seq=7, update_time=1))
    store.commit(tid, DeleteRecords((Region((Range("key", 50, None),)),), update_time=2))
    state = store.load_state(tid)
    assert state.delete_count == 2
    assert [(t.number, t.where, t.buffer_seq) for t in sorted(state.tombstones.values(), key=lambda t: t.number)] \
        == [(1, "ts > 5", 7), (2, None, 0)]
    assert state.tombstones[1].regions == (KEYS,)
    store.commit(tid, DropTombstones((1,)))
    state = store.load_state(tid)
    assert list(state.tombstones) == [2] and state.delete_count == 2
    store.commit(tid, DeleteRecords((KEYS,)))
    assert set(store.load_state(tid).tombstones) == {2, 3}


def test_an_empty_range_or_an_unknown_tombstone_is_refused_and_nothing_changes(store: StateStore):
    tid = new_table(store)
    with pytest.raises(TransactionError, match="empty"):
        store.commit(tid, DeleteRecords((Region((Range("key", 20, 20),)),)))
    with pytest.raises(TransactionError, match="does not exist"):
        store.commit(tid, DropTombstones((1,)))
    state = store.load_state(tid)
    assert state.delete_count == 0 and not state.tombstones


def test_references_keep_their_delete_horizon_through_splits_and_compaction(store: StateStore):
    tid = new_table(store)
    store.commit(tid, AddFiles((FileReference("a", "root", 10, delete_horizon=3),
                                FileReference("b", "L", 5, delete_horizon=1))))
    store.commit(tid, SplitFileReferences((SplitFileReference("a", "root", (
        FileReference("a", "L", 5, True, False, delete_horizon=3),
        FileReference("a", "R", 5, True, False, delete_horizon=3))),)))
    assert {(r.filename, r.partition_id): r.delete_horizon for r in store.load_state(tid).references.values()} \
        == {("a", "L"): 3, ("a", "R"): 3, ("b", "L"): 1}
    store.commit(tid, AssignJobIds((JobAssignment("j", "L", ("a", "b")),)))
    store.commit(tid, ReplaceFileReferences("j", "L", ("a", "b"), FileReference("c", "L", 10, delete_horizon=4)))
    refs = store.load_state(tid).references
    assert refs[("c", "L")].delete_horizon == 4 and refs[("a", "R")].delete_horizon == 3


def test_a_reader_of_changes_learns_of_a_delete_and_of_a_drop(store: StateStore):
    tid = new_table(store)
    first = store.changes_since(tid)
    assert first.tombstones == ()
    store.commit(tid, DeleteRecords((KEYS,)))
    after = store.changes_since(tid, first.token)
    assert after.tombstones is not None and [t.number for t in after.tombstones] == [1]
    store.commit(tid, DropTombstones((1,)))
    dropped = store.changes_since(tid, after.token)
    assert dropped.tombstones == ()
    again = store.changes_since(tid, dropped.token)
    assert not again.tombstones  # None (unchanged) or empty


def test_a_delete_survives_a_dynamodb_snapshot(moto_endpoint_url, tmp_path):
    from statestore.dynamodb import open_dynamodb
    from tests.integration.statestore.conftest import dynamodb_options

    opts = dynamodb_options(moto_endpoint_url, tmp_path / "blobs")
    writer = open_dynamodb(**opts, snapshot_every=2)
    tid = new_table(writer)
    writer.commit(tid, AddFiles((FileReference("a", "L", 3, delete_horizon=0),)))
    writer.commit(tid, DeleteRecords((KEYS,), "ts = 1"))
    writer.commit(tid, AddFiles((FileReference("b", "L", 3, delete_horizon=1),)))
    reader = open_dynamodb(**opts)
    state = reader.load_state(tid)
    assert reader._cache.entry(tid).snapshot_n >= 2
    assert state.delete_count == 1 and state.tombstones[1].where == "ts = 1"
    assert state.references[("b", "L")].delete_horizon == 1
    assert replace(state.references[("a", "L")], update_time=0).delete_horizon == 0


def test_the_tombstones_read_alone_agree_with_the_state(store: StateStore):
    tid = new_table(store)
    assert store.tombstones(tid) == (0, ())
    store.commit(tid, DeleteRecords((KEYS,), update_time=5))
    count, live = store.tombstones(tid)
    assert count == 1 and [t.number for t in live] == [1] and live[0].created_ms == 5


def test_the_buffer_high_water_is_the_last_sequence_number_buffered(store: StateStore):
    from statestore.errors import NotSupportedError

    tid = new_table(store)
    try:
        assert store.buffer_high_water(tid) == 0
        first = store.append_buffer(tid, b"x", 1)
        second = store.append_buffer(tid, b"y", 1)
    except NotSupportedError:
        pytest.skip("no write buffer on this backend")
    assert store.buffer_high_water(tid) == max(first, second)


def test_the_records_holding_a_deletes_keys_are_listed_and_the_history_keeps_only_a_digest(store: StateStore):
    tid = new_table(store)
    store.commit(tid, DeleteRecords((KEYS,), update_time=1))
    records = store.delete_key_records(tid, now_ms=1)
    assert [r.what for r in records][0] == "tombstone 1"
    assert all(r.holds_any((KEYS,)) for r in records)
    assert not any(r.holds_any((Region((Range("key", 30, 40),)),)) for r in records)
    (summary,) = [h for h in store.history(tid, limit=5) if h.kind == "delete_records"]
    assert summary.detail is not None and summary.detail.startswith("delete 1: 1 region of key, sha256 ")
    assert "10" not in summary.detail.split("sha256")[0]
    store.commit(tid, DropTombstones((1,)))
    left = store.delete_key_records(tid, now_ms=1)
    assert "tombstone 1" not in [r.what for r in left] and left, "the history still holds the keys until retention"
    assert list(store.record_blobs(tid)) == []
