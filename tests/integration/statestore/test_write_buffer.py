"""The write buffer on every backend (statestore.buffer): a write is stored whole with a
sequence number that grows per table; reads see a consistent snapshot with the flush
count; a flush's commit removes exactly its entries together with its data, and a
second flush of the same entries is refused with nothing changed; backpressure refuses
a write that would pass the limit."""

from __future__ import annotations

import threading

import pytest

from statestore import AddFiles, FileReference, StateStore, TableNotFoundError
from statestore.errors import BookkeepingError, BufferFullError
from statestore.jobs import JobRecord
from tests.integration.statestore.test_behaviour import new_table


def _refs(*names: str) -> AddFiles:
    return AddFiles(tuple(FileReference(n, "L", 10) for n in names))


def test_writes_get_growing_sequence_numbers_and_read_back_in_order(store: StateStore) -> None:
    tid = new_table(store)
    seqs = [store.append_buffer(tid, bytes([i]) * 10, i + 1) for i in range(5)]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    snap = store.read_buffer(tid)
    assert snap.seqs == tuple(seqs)
    assert [e.data for e in snap.entries] == [bytes([i]) * 10 for i in range(5)]
    assert snap.rows == 15 and snap.flushes == 0
    stats = store.buffer_stats(tid)
    assert (stats.entries, stats.rows, stats.flushes) == (5, 15, 0) and stats.oldest_ms is not None


def test_reads_bound_by_sequence_number_and_rows_and_skip_bytes(store: StateStore) -> None:
    tid = new_table(store)
    seqs = [store.append_buffer(tid, b"abc", 10) for _ in range(4)]
    assert store.read_buffer(tid, up_to_seq=seqs[1]).seqs == tuple(seqs[:2])
    assert store.read_buffer(tid, max_rows=15).seqs == tuple(seqs[:2])  # the first entries holding >= 15 rows
    assert store.read_buffer(tid, max_rows=1).seqs == tuple(seqs[:1])
    snap = store.read_buffer(tid, skip_data={seqs[0], seqs[2]})
    assert [e.data is None for e in snap.entries] == [True, False, True, False]


def test_a_flush_commit_removes_exactly_its_entries_with_its_data(store: StateStore) -> None:
    tid = new_table(store)
    seqs = [store.append_buffer(tid, b"r", 1) for _ in range(3)]
    job = JobRecord.created(tid, "flush-1", "flush").started(outputs=["f1"])
    store.put_job(job)
    assert store.commit(tid, _refs("f1"), job=job.committed(), buffer_seqs=seqs[:2]) is True
    snap = store.read_buffer(tid)
    assert snap.seqs == (seqs[2],) and snap.flushes == 1
    assert "f1" in store.load_state(tid).files
    # a second flush of the same entries is refused, changing nothing
    with pytest.raises(BookkeepingError, match="no longer buffered"):
        store.commit(tid, _refs("f2"), buffer_seqs=seqs[1:])
    assert store.read_buffer(tid).seqs == (seqs[2],)
    assert "f2" not in store.load_state(tid).files
    assert store.buffer_stats(tid).flushes == 1


def test_a_refused_transaction_keeps_the_entries(store: StateStore) -> None:
    tid = new_table(store)
    store.commit(tid, _refs("a"))
    seq = store.append_buffer(tid, b"r", 1)
    with pytest.raises(Exception, match="a"):
        store.commit(tid, _refs("a"), buffer_seqs=[seq])  # file "a" already exists
    assert store.read_buffer(tid).seqs == (seq,)


def test_a_full_buffer_refuses_writes_whole(store: StateStore) -> None:
    tid = new_table(store)
    store.append_buffer(tid, b"r", 60, max_rows=100)
    with pytest.raises(BufferFullError, match="buffer full, flush pending"):
        store.append_buffer(tid, b"r", 41, max_rows=100)
    store.append_buffer(tid, b"r", 40, max_rows=100)  # exactly at the limit
    with pytest.raises(BufferFullError):
        store.append_buffer(tid, b"r", 1, max_rows=100)
    with pytest.raises(BufferFullError, match="more than the buffer's maximum"):
        store.append_buffer(new_table(store, "other"), b"r", 101, max_rows=100)
    assert store.buffer_stats(tid).rows == 100


def test_the_buffer_belongs_to_its_table(store: StateStore) -> None:
    t1, t2 = new_table(store, "t1"), new_table(store, "t2")
    store.append_buffer(t1, b"1", 1)
    assert store.read_buffer(t2).entries == ()
    store.delete_table("t1")
    with pytest.raises(TableNotFoundError):
        store.append_buffer(t1, b"1", 1)
    with pytest.raises(TableNotFoundError):
        store.read_buffer(t1)
    with pytest.raises(TableNotFoundError):
        store.buffer_stats(t1)


def test_concurrent_writers_lose_nothing_and_racing_flushes_take_each_entry_once(store: StateStore) -> None:
    tid = new_table(store)
    written: list[int] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        for i in range(25):
            s = store.append_buffer(tid, f"{w}-{i}".encode(), 1)
            with lock:
                written.append(s)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(written)) == 100
    snap = store.read_buffer(tid)
    assert sorted(snap.seqs) == sorted(written)
    outcomes: list[str] = []

    def flusher(n: int) -> None:
        try:
            store.commit(tid, _refs(f"flush-{n}"), buffer_seqs=snap.seqs[:80])  # DynamoDB: at most 90
            outcomes.append("applied")
        except BookkeepingError:
            outcomes.append("refused")

    racers = [threading.Thread(target=flusher, args=(n,)) for n in range(3)]
    for t in racers:
        t.start()
    for t in racers:
        t.join()
    assert sorted(outcomes) == ["applied", "refused", "refused"]
    assert store.read_buffer(tid).seqs == snap.seqs[80:] and store.buffer_stats(tid).flushes == 1
    assert store.buffer_stats(tid).rows == 20
    assert len([f for f in store.load_state(tid).files if f.startswith("flush-")]) == 1


def test_reads_bound_by_entries_and_large_entries_round_trip(store: StateStore) -> None:
    tid = new_table(store)
    big = bytes(range(256)) * 2000  # 512 KB: over a DynamoDB item's size, behind a pointer there
    seqs = [store.append_buffer(tid, big, 1), store.append_buffer(tid, b"s", 1), store.append_buffer(tid, b"t", 1)]
    assert store.read_buffer(tid, max_entries=2).seqs == tuple(seqs[:2])
    assert store.read_buffer(tid).entries[0].data == big
    store.commit(tid, _refs("f"), buffer_seqs=seqs[:1])
    assert store.read_buffer(tid).seqs == tuple(seqs[1:])
    assert store.buffer_stats(tid).rows == 2


def test_the_blob_sweep_never_takes_what_a_row_names(store: StateStore) -> None:
    """sweep_blobs with a floor in the future deletes nothing a row names: the large
    entry still buffered and the table's state read whole afterwards, records exact."""
    import time

    tid = new_table(store)
    big = bytes(range(256)) * 2000  # 512 KB: behind a pointer on DynamoDB
    seqs = [store.append_buffer(tid, big, 3), store.append_buffer(tid, big[::-1], 4)]
    store.commit(tid, _refs("f"), buffer_seqs=seqs[:1])
    assert store.sweep_blobs(tid, older_than_ms=int(time.time() * 1000) + 60_000) == []
    assert [(e.seq, e.rows, e.data) for e in store.read_buffer(tid).entries] == [(seqs[1], 4, big[::-1])]
    assert store.buffer_stats(tid).rows == 4
    assert sum(r.record_count for r in store.load_state(tid).references.values()) == 10


def test_writes_flushed_through_the_api_end_in_files_exactly_once(store: StateStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Table.write and Table.flush on each backend: 120 writes (more than a DynamoDB
    flush commit may remove, so several rounds there), every record queried once before
    and after the flush."""
    import pyarrow as pa

    from sleeper_ops import Sleeper
    from sleeper_ops.io.storage import ObjectStore

    s = Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data")))
    t = s.create_table("api", {"rowKeyFields": [{"name": "k", "type": "LongType"}]}, split_points=[600])
    for i in range(120):
        t.write(pa.table({"k": pa.array(range(i * 10, i * 10 + 10), pa.int64())}))
    assert t.query(ranges=[(0, None)])["k"].to_pylist() == list(range(1200))
    r = t.flush()
    assert r.records == 1200 and t.buffer_stats().rows == 0
    if store.buffer_max_flush_entries is not None:
        assert r.rounds >= 2
    assert t.query(ranges=[(0, None)], buffer=False)["k"].to_pylist() == list(range(1200))
    assert t.query(ranges=[(0, None)])["k"].to_pylist() == list(range(1200))
