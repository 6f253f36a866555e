"""No stray copies in the DynamoDB store's blob store (issue 33, finding 3; DESIGN.md
section 12): a flush deletes its entries' blobs once its commit is known applied, also
when a retry after a lost reply finds it applied; and :meth:`sweep_blobs` deletes, after
the floor and never before, the blobs no item names (left by an unknown outcome or a
failed best-effort delete), and never one that a buffer entry, a log item, a pending
group-commit request, a snapshot or a job record names."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from statestore import AddFiles, FileReference, Schema, partitions_from_split_points
from statestore.bookkeeping import Bookkeeping
from statestore.dynamodb import open_dynamodb
from statestore.dynamodb.group_batch import pending_item
from statestore.dynamodb.log import EncodedTransaction
from statestore.errors import SleeperError, StateStoreUnavailableError, TransactionError
from statestore.jobs import JobRecord
from tests.faults.aws_proxy import FaultProxy
from tests.integration.statestore.conftest import dynamodb_options

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}]})
#: bytes of a buffered write too large for its item: they go to a blob
BIG = 400 * 1024


@pytest.fixture
def proxy(moto_endpoint_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_endpoint_url, seed=33) as p:
        yield p


@pytest.fixture
def options(moto_endpoint_url: str, tmp_path: Path) -> dict[str, Any]:
    return dynamodb_options(moto_endpoint_url, tmp_path / "blobs")


def _blobs(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _table(store: Any) -> tuple[str, str]:
    tid = store.create_table(f"t{uuid.uuid4().hex[:6]}", SCHEMA, partitions_from_split_points(SCHEMA, [])).table_id
    return tid, store.partitions(tid)[0].id


def _big_add(leaf: str, n: int) -> AddFiles:
    """An AddFiles whose compressed body is over the inline limit (its body is a blob)."""
    return AddFiles(tuple(FileReference(f"{uuid.uuid4().hex}/{os.urandom(12).hex()}.parquet", leaf, 1)
                          for _ in range(n)))


def test_a_flush_found_applied_after_a_lost_reply_deletes_its_entries_blobs(proxy, options, tmp_path):
    faulty = open_dynamodb(**{**options, "endpoint_url": proxy.url}, group_commit=False)
    tid, leaf = _table(faulty)
    seqs = [faulty.append_buffer(tid, os.urandom(BIG), 1000) for _ in range(2)]
    assert len([b for b in _blobs(tmp_path / "blobs") if b.startswith(f"{tid}/buffer/")]) == 2
    rule = proxy.inject("lost", operation="TransactWriteItems", body=b'-log"')
    faulty.commit(tid, AddFiles((FileReference("flushed.parquet", leaf, 2000),)), buffer_seqs=seqs)
    assert rule.fired == 1
    fresh = open_dynamodb(**options)
    assert [b for b in _blobs(tmp_path / "blobs") if b.startswith(f"{tid}/buffer/")] == []
    assert fresh.buffer_stats(tid).entries == 0 and fresh.buffer_stats(tid).rows == 0
    assert {f: r.record_count for (f, _), r in fresh.load_state(tid).references.items()} == {"flushed.parquet": 2000}
    assert fresh.transaction_number(tid) == 2


def test_the_sweep_deletes_unnamed_blobs_after_the_floor_and_never_a_named_one(proxy, options, tmp_path):
    root = tmp_path / "blobs"
    faulty = open_dynamodb(**{**options, "endpoint_url": proxy.url}, group_commit=False)
    faulty.outcome_timeout_seconds = 1
    tid, leaf = _table(faulty)
    # named: a buffer entry's bytes, a logged body, a snapshot, a pending request's body, a job record
    assert faulty.append_buffer(tid, os.urandom(BIG), 1000) == 1
    assert faulty.commit(tid, _big_add(leaf, 10_000)) is True
    faulty.snapshot(tid)
    faulty.put_job(JobRecord.created(tid, "big", "compaction").started(
        outputs=[f"{tid}/data/{i:06d}-{uuid.uuid4().hex}.parquet" for i in range(6000)]))
    named = _blobs(root)
    # unnamed: a buffered write and a commit whose outcomes were unknown (DynamoDB throttled
    # every try), and a refused commit whose best-effort delete of its body failed
    throttle = proxy.inject("throttle", operation="TransactWriteItems", times=None)
    with pytest.raises(StateStoreUnavailableError):
        faulty.append_buffer(tid, os.urandom(BIG), 500)
    with pytest.raises(StateStoreUnavailableError):
        faulty.commit(tid, _big_add(leaf, 10_000))
    proxy.clear()
    assert throttle.fired >= 2
    grouped = open_dynamodb(**options)  # encodes (spills) the body before it validates
    grouped._blobs.delete = lambda keys: (_ for _ in ()).throw(StateStoreUnavailableError("the object store is down"))
    with pytest.raises(TransactionError):
        grouped.commit(tid, _big_add("no-such-partition", 10_000))
    stray = sorted(set(_blobs(root)) - set(named))
    assert len(stray) == 3 and sum(b.startswith(f"{tid}/buffer/") for b in stray) == 1
    # named too: the body of a request pending in group commit (its owner waits, or died)
    pending = EncodedTransaction.of(tid, _big_add(leaf, 10_000), faulty._blobs)
    requests = faulty.commits.group.requests
    requests.put_pending(pending_item(tid, pending, Bookkeeping(uuid.uuid4().hex, None, None), None,
                                      uuid.uuid4().hex, int(time.time() * 1000)), "a request")
    named = sorted(set(_blobs(root)) - set(stray))
    assert sorted({b.split("/")[0] for b in named}) == sorted({tid, "transactions", "snapshots", "jobs"})
    assert sum(b.startswith("transactions/") for b in named) == 2

    store = open_dynamodb(**options)
    now = int(time.time() * 1000)
    assert store.sweep_blobs(tid, older_than_ms=now - 60_000) == []  # younger than the floor
    assert _blobs(root) == sorted([*named, *stray])
    assert store.sweep_blobs(tid, older_than_ms=now + 1000, dry_run=True) == stray
    assert _blobs(root) == sorted([*named, *stray])
    assert store.sweep_blobs(tid, older_than_ms=now + 1000) == stray
    assert _blobs(root) == named
    assert store.sweep_blobs(tid, older_than_ms=now + 1000) == []
    # the records: one buffered write, one logged commit, the request still pending
    assert store.buffer_stats(tid).entries == 1 and store.buffer_stats(tid).rows == 1000
    assert len(store.read_buffer(tid).entries[0].data or b"") == BIG
    assert len(store.load_state(tid).files) == 10_000 and store.transaction_number(tid) == 2
    assert len(store.commits.group.requests.pending(tid)) == 1
    assert store.get_job(tid, "big") is not None and len(store.get_job(tid, "big").outputs) == 6000


def test_gc_sweeps_what_a_lost_write_left_after_the_orphan_grace_and_a_dry_run_counts_it(proxy, options, tmp_path):
    """r5 through the library: a flush whose reply was lost leaves no blob, and the blob
    of a buffered write whose outcome was unknown is counted by a dry run, kept within
    the orphan grace and deleted by GC after it; every acknowledged record is there once."""
    pa = pytest.importorskip("pyarrow")
    from sleeper_ops.api import Sleeper
    from sleeper_ops.io.storage import ObjectStore
    from sleeper_ops.maintenance.gc import collect_garbage
    from statestore.properties import GC_ORPHAN_GRACE_MINUTES

    root = tmp_path / "blobs"
    faulty = open_dynamodb(**{**options, "endpoint_url": proxy.url}, group_commit=False)
    schema = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}],
                               "valueFields": [{"name": "value", "type": "StringType"}]})
    with Sleeper(state_store=faulty, objects=ObjectStore(str(tmp_path / "data"))) as sl:
        t = sl.create_table("buffered", schema)
        t.write(pa.table({"key": [f"k{i:05d}" for i in range(3000)], "value": ["v" * 200] * 3000}))
        assert len(_blobs(root / t.info.table_id / "buffer")) == 1
        lost = proxy.inject("lost", operation="TransactWriteItems", body=b'-log"')
        t.flush()
        assert lost.fired == 1
        assert not (root / t.info.table_id / "buffer").exists() or _blobs(root / t.info.table_id / "buffer") == []
        proxy.inject("throttle", operation="TransactWriteItems", body=b"b!head", times=None)
        with pytest.raises(SleeperError):  # its outcome is unknown to it
            t.write(pa.table({"key": [f"x{i:05d}" for i in range(3000)], "value": ["w" * 200] * 3000}))
        proxy.clear()
        left = [f"{t.info.table_id}/buffer/{b}" for b in _blobs(root / t.info.table_id / "buffer")]
        assert len(left) == 1
        table = faulty.get_table("buffered")
        now = int(time.time() * 1000)
        after_grace = now + (table.get_int(GC_ORPHAN_GRACE_MINUTES) + 1) * 60_000
        assert collect_garbage(faulty, sl.objects, table, now_ms=now).blobs_deleted == []
        dry = collect_garbage(faulty, sl.objects, table, now_ms=after_grace, dry_run=True)
        assert dry.blobs_deleted == left and "1 state store blob nothing named" in dry.summary()
        assert [f"{t.info.table_id}/buffer/{b}" for b in _blobs(root / t.info.table_id / "buffer")] == left
        assert collect_garbage(faulty, sl.objects, table, now_ms=after_grace).blobs_deleted == left
        assert _blobs(root / t.info.table_id / "buffer") == []
        store = open_dynamodb(**options)
        assert store.buffer_stats(t.info.table_id).rows == 0
        assert sum(r.record_count for r in store.load_state(t.info.table_id).references.values()) == 3000


def test_a_buffer_read_whose_blob_a_flush_deleted_meanwhile_reads_again(options, tmp_path):
    """Issue 33, 9: the entry was read, then a flush committed it and deleted its blob
    before the read fetched the blob. The read reads again: the entry is gone (its
    records are in a file now), the other entry is read whole."""
    store = open_dynamodb(**options, group_commit=False)
    flusher = open_dynamodb(**options, group_commit=False)
    tid, leaf = _table(store)
    first = store.append_buffer(tid, os.urandom(BIG), 1000)
    second_bytes = os.urandom(BIG)
    store.append_buffer(tid, second_bytes, 700)
    get = store._blobs.get
    flushed: list[int] = []

    def get_after_a_flush(key: str) -> bytes:
        if not flushed:
            flushed.append(first)
            flusher.commit(tid, AddFiles((FileReference("flushed.parquet", leaf, 1000),)), buffer_seqs=[first])
        return get(key)

    store._blobs.get = get_after_a_flush  # type: ignore[method-assign]
    snapshot = store.read_buffer(tid)
    assert flushed == [first]
    assert [(e.rows, len(e.data or b"")) for e in snapshot.entries] == [(700, BIG)]
    assert snapshot.entries[0].data == second_bytes
    assert sum(r.record_count for r in store.load_state(tid).references.values()) == 1000
    assert store.buffer_stats(tid).rows == 700


def test_deleting_a_table_leaves_none_of_its_blobs(options, tmp_path):
    """A deleted table's buffered writes, job records, bodies and snapshots go with it:
    no sweep runs for a table no longer in the catalog."""
    store = open_dynamodb(**options, group_commit=False)
    tid, leaf = _table(store)
    keep, _ = _table(store)
    for t in (tid, keep):
        store.append_buffer(t, os.urandom(BIG), 1000)
    assert store.commit(tid, _big_add(leaf, 10_000)) is True
    store.snapshot(tid)
    store.put_job(JobRecord.created(tid, "big", "compaction").started(
        outputs=[f"{tid}/data/{i:06d}-{uuid.uuid4().hex}.parquet" for i in range(6000)]))
    assert len([b for b in _blobs(tmp_path / "blobs") if tid in b]) == 4
    store.delete_table(next(i.name for i in store.list_tables() if i.table_id == tid))
    assert [b for b in _blobs(tmp_path / "blobs") if tid in b] == []
    assert [b for b in _blobs(tmp_path / "blobs") if keep in b] != []
    assert store.buffer_stats(keep).rows == 1000


def test_a_large_commit_repeated_under_its_commit_id_leaves_only_the_logged_body(options, tmp_path):
    """A commit id applied before, sent again by another call (a retry after an unknown
    outcome): that call spilled its body before it found the id applied, and deletes it;
    the logged body stays."""
    first, again = open_dynamodb(**options), open_dynamodb(**options)  # group commit on: the body is spilled first
    tid, leaf = _table(first)
    txn = _big_add(leaf, 10_000)
    assert first.commit(tid, txn, commit_id="import-1") is True
    assert again.commit(tid, txn, commit_id="import-1") is False
    bodies = [b for b in _blobs(tmp_path / "blobs") if b.startswith(f"transactions/{tid}/")]
    assert len(bodies) == 1
    assert first.commits.sweep.logged_body(tid, "import-1") == bodies[0]
    store = open_dynamodb(**options)
    assert len(store.load_state(tid).files) == 10_000 and store.transaction_number(tid) == 2
