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
        ("assign_job_ids", 0, 0, 0, 0, None),
        ("add_files", 3, 0, 22, 0, None),
    ]
    assert got[1].detail == "forgot 1 unreferenced file"
    assert got[2].detail is not None and got[2].detail.startswith("delete 1: key in [10, 20)")
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
