"""History and as-of states (issue 22, :mod:`statestore.history`) on every backend: the
state rebuilt as of each transaction equals the state read right after it committed,
every transaction is summarised (files and records added and removed, its job), and
refusals (a number the table never had, a time before the retention, a state replaced
before it) come in one line."""

from __future__ import annotations

import datetime

import pytest

from statestore import (
    AddFiles,
    AssignJobIds,
    DeleteFiles,
    DeleteRecords,
    FileReference,
    JobAssignment,
    Range,
    Region,
    ReplaceFileReferences,
    StateStore,
)
from statestore.clock import ManualClock, use_clock
from statestore.history import HistoryError, resolve_as_of
from statestore.jobs import JobRecord
from tests.integration.statestore.test_behaviour import new_table

MINUTE = 60_000


def _work(store: StateStore, tid: str) -> list[tuple[int, tuple]]:
    """Commit a little of everything; (transaction number, state) after each commit."""
    out = []

    def commit(txn, **kw) -> None:
        store.commit(tid, txn, **kw)
        out.append((store.transaction_number(tid), store.load_state(tid).canonical()))

    commit(AddFiles((FileReference("a", "L", 10), FileReference("b", "L", 5), FileReference("c", "R", 7))))
    commit(AssignJobIds((JobAssignment("j1", "L", ("a", "b")),)))
    commit(ReplaceFileReferences("j1", "L", ("a", "b"), FileReference("ab", "L", 15)))
    commit(DeleteRecords((Region((Range("key", 10, 20),)),)))
    commit(DeleteFiles(("a",)))
    job = JobRecord(tid, "ingest-7", "ingest", "committed", outputs=("d",))
    commit(AddFiles((FileReference("d", "R", 3),)), job=job)
    return out


def test_the_state_as_of_each_transaction_is_the_state_after_it(store: StateStore):
    tid = new_table(store)
    after = _work(store, tid)
    for number, state in after:
        assert store.state_as_of(tid, number).canonical() == state, f"as of {number}"
    numbers = [n for n, _ in after]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


def test_history_summarises_each_transaction_newest_first(store: StateStore):
    tid = new_table(store)
    numbers = [n for n, _ in _work(store, tid)]
    got = store.history(tid, limit=6)
    assert [h.number for h in got] == numbers[::-1]
    rows = [(h.kind, h.files_added, h.files_removed, h.records_added, h.records_removed, h.job_id) for h in got]
    assert rows == [
        ("add_files", 1, 0, 3, 0, "ingest-7"),
        ("delete_files", 0, 0, 0, 0, None),
        ("delete_records", 0, 0, 0, 0, None),
        ("replace_file_references", 1, 2, 15, 15, "j1"),
        ("assign_job_ids", 0, 0, 0, 0, "j1"),
        ("add_files", 3, 0, 22, 0, None),
    ]
    assert got[1].detail == "forgot 1 unreferenced file"
    # a delete's detail holds no keys, only a digest (docs/adr/0015-erasure-of-delete-keys.md)
    assert got[2].detail is not None and got[2].detail.startswith("delete 1: 1 region of key, sha256 ")
    assert [h.number for h in store.history(tid, limit=2, upto=numbers[2])] == [numbers[2], numbers[1]]
    assert store.history_after(tid, numbers[2]).number == numbers[3]
    assert store.history_after(tid, numbers[-1]) is None


def test_as_of_a_time_is_the_last_transaction_at_or_before_it(store: StateStore):
    tid = new_table(store)
    after = _work(store, tid)
    last = store.history(tid, limit=1)[0]
    when = datetime.datetime.fromtimestamp((last.time_ms + 1) / 1000, datetime.UTC)
    got = resolve_as_of(store, tid, "t", when, retention=30 * MINUTE, now_ms=last.time_ms + MINUTE)
    assert got.number == after[-1][0] and got.state.canonical() == after[-1][1]


def test_as_of_refuses_unknown_numbers_old_times_and_replaced_states(store: StateStore):
    tid = new_table(store)
    after = _work(store, tid)
    newest = store.history(tid, limit=1)[0]
    now = newest.time_ms + 5 * MINUTE
    with pytest.raises(HistoryError, match="no transaction 999999999"):
        resolve_as_of(store, tid, "t", 999_999_999, retention=30 * MINUTE, now_ms=now)
    old = datetime.datetime.fromtimestamp((now - 31 * MINUTE) / 1000, datetime.UTC)
    with pytest.raises(HistoryError, match="keeps 30 minutes of history"):
        resolve_as_of(store, tid, "t", old, retention=30 * MINUTE, now_ms=now)
    with pytest.raises(HistoryError, match="was replaced at"):  # its successor committed 2 minutes before the retention
        resolve_as_of(store, tid, "t", after[0][0], retention=2 * MINUTE, now_ms=now + 10 * MINUTE)
    # the newest state is never replaced: readable however old
    assert resolve_as_of(store, tid, "t", after[-1][0], retention=0, now_ms=now + 10 * MINUTE).number == after[-1][0]


@pytest.mark.integration
def test_dynamodb_expiry_keeps_the_snapshot_and_log_every_retained_state_needs(moto_endpoint_url, tmp_path):
    """Snapshots every 3 transactions, one body too big for its log item (in the object
    store), a transaction a minute; expiry 60 minutes after the 20th of 30 keeps exactly
    what rebuilds the states still retained (60 minutes), and deletes older log items
    and snapshots."""
    import uuid

    from statestore.dynamodb import open_dynamodb
    from tests.integration.statestore.conftest import dynamodb_options

    clock = ManualClock(1_800_000_000_000 - 10_001_000)
    with use_clock(clock):
        store = open_dynamodb(**dynamodb_options(moto_endpoint_url, tmp_path / "blobs"), snapshot_every=3,
                              snapshot_seconds=10_000, retention_margin=0, retention_seconds=0)
        try:
            tid = new_table(store, **{"sleeper.table.history.retention.minutes": "60"})
            store.load_state(tid)
            # the first commit comes more than snapshot_seconds after the table was loaded: it makes a
            # snapshot (then one every 3 transactions: 2, 5, ..., 20, the newest before the retention)
            clock.set(1_800_000_000_000)
            states = {}
            for i in range(30):
                clock.advance(MINUTE)
                refs = [FileReference(f"f{i}", "L", i + 1)]
                if i == 4:  # a body of ~1 MB compressed: stored in the object store, the log item points to it
                    refs += [FileReference(f"{uuid.uuid4().hex}{uuid.uuid4().hex}", "R", 1) for _ in range(15_000)]
                store.commit(tid, AddFiles(tuple(refs)))
                states[store.transaction_number(tid)] = (clock.now_ms(), store.load_state(tid).canonical())
            assert any(it.get("body_key") for it in store._dynamo.query("x", "log", "table_id = :t",
                                                                         {":t": {"S": tid}}))
            now = clock.now_ms() + 50 * MINUTE  # the retention began 60 minutes before: at the 20th transaction
            deleted_log, deleted_snapshots = store.expire(tid, now_ms=now)
            assert deleted_log > 0 and deleted_snapshots > 0
            retained = [number for number in sorted(states)
                        if number == max(states) or states[number + 1][0] >= now - 60 * MINUTE]
            assert retained[0] < 22
            for number in retained:
                got = resolve_as_of(store, tid, "t", number, retention=60 * MINUTE, now_ms=now)
                assert got.state.canonical() == states[number][1], f"as of {number}"
            with pytest.raises(HistoryError):
                resolve_as_of(store, tid, "t", 3, retention=60 * MINUTE, now_ms=now)
        finally:
            store.close()


def test_dynamodb_expiry_keeps_the_state_whose_successor_committed_as_the_retention_began(moto_endpoint_url,
                                                                                         tmp_path):
    """A snapshot made exactly as the retention began (its transaction committed at
    ``now - retention``): the state before that transaction is still retained (its
    successor is not before the retention), so expiry keeps what rebuilds it, as
    PostgreSQL's pruning does (the newest row applied strictly before the retention)."""
    from statestore.dynamodb import open_dynamodb, snapshots
    from tests.integration.statestore.conftest import dynamodb_options

    clock = ManualClock(1_800_000_000_000)
    with use_clock(clock):
        store = open_dynamodb(**dynamodb_options(moto_endpoint_url, tmp_path / "blobs"), snapshot_every=3,
                              snapshot_seconds=10_000, retention_margin=0, retention_seconds=0)
        try:
            tid = new_table(store, **{"sleeper.table.history.retention.minutes": "60"})
            states = {}
            for i in range(12):  # a transaction a minute
                clock.advance(MINUTE)
                store.commit(tid, AddFiles((FileReference(f"f{i}", "L", i + 1),)))
                states[store.transaction_number(tid)] = (clock.now_ms(), store.load_state(tid).canonical())
            snap = [p for p in snapshots.all_pointers(store._dynamo, tid) if p.n in states][-2]
            assert snap.time_ms == states[snap.n][0] and snap.n - 1 in states
            now = snap.time_ms + 60 * MINUTE  # the retention begins as the snapshot's transaction commits
            store.expire(tid, now_ms=now)
            retained = [number for number in sorted(states)
                        if number == max(states) or states[number + 1][0] >= now - 60 * MINUTE]
            assert retained[0] == snap.n - 1
            for number in retained:
                got = resolve_as_of(store, tid, "t", number, retention=60 * MINUTE, now_ms=now)
                assert got.state.canonical() == states[number][1], f"as of {number}"
        finally:
            store.close()


def test_pruning_forgets_only_history_no_retained_state_needs(store: StateStore):
    tid = new_table(store, **{"sleeper.table.history.retention.minutes": "60"})
    after = _work(store, tid)
    newest = store.history(tid, limit=1)[0]
    assert store.prune_history(tid, newest.time_ms + 30 * MINUTE) == 0
    assert [h.number for h in store.history(tid, limit=6)] == [n for n, _ in after][::-1]
    store.prune_history(tid, newest.time_ms + 61 * MINUTE)
    later = newest.time_ms + 61 * MINUTE
    got = resolve_as_of(store, tid, "t", after[-1][0], retention=60 * MINUTE, now_ms=later)
    assert got.state.canonical() == after[-1][1], "the newest state is always retained"
    with pytest.raises(HistoryError):
        resolve_as_of(store, tid, "t", after[0][0], retention=60 * MINUTE, now_ms=later)


@pytest.mark.integration
def test_postgres_pruning_keeps_the_state_current_when_the_retention_began(pg_dsn):
    from statestore.postgres import PostgresStateStore

    with PostgresStateStore(pg_dsn) as store:
        tid = new_table(store, **{"sleeper.table.history.retention.minutes": "60"})
        numbers = [n for n, _ in _work(store, tid)]
        base = 1_800_000_000_000

        def spread(cur) -> None:  # type: ignore[no-untyped-def]
            for i, number in enumerate(numbers):  # a transaction a minute
                cur.execute("UPDATE table_history SET applied_ms = %s WHERE table_id = %s AND number = %s",
                            (base + i * MINUTE, tid, number))

        store.db.run("spread the history", spread)
        now = base + 3 * MINUTE + 30_000 + 60 * MINUTE  # the retention began between the 4th and 5th
        assert store.prune_history(tid, now) == 3
        got = resolve_as_of(store, tid, "t", numbers[3], retention=60 * MINUTE, now_ms=now)
        assert got.number == numbers[3], "its successor committed within the retention"
        with pytest.raises(HistoryError, match="no transaction"):
            resolve_as_of(store, tid, "t", numbers[2], retention=60 * MINUTE, now_ms=now)
