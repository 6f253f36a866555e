"""Incremental reads (``StateStore.changes_since``, :mod:`statestore.changes`) on every
backend: a copy kept up to date from the changes always equals the loaded state --
after adds, splits, push-downs, compactions, deletions and clears, and from tokens of
any age -- an unchanged table answers with no rows, and the answer carries the
current catalog entry."""

from __future__ import annotations

import pytest

from statestore import (
    AddFiles,
    AssignJobIds,
    ClearFiles,
    DeleteFiles,
    FileReference,
    JobAssignment,
    ReplaceFileReferences,
    Schema,
    SplitFileReference,
    SplitFileReferences,
    SplitPartition,
    StateStore,
    TableChanges,
    TableNotFoundError,
    TableState,
)
from statestore.partitions import ROOT_ID, Partition, root_region, split_children

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "LongType"}], "sortKeyFields": [],
                           "valueFields": [{"name": "v", "type": "StringType"}]})
ROOT, L, R = split_children(Partition(ROOT_ID, root_region(SCHEMA)), 0, 100, "L", "R")
T1, T2, T3 = 2_000, 3_000, 4_000


def ref(name: str, pid: str, count: int = 10, **kw) -> FileReference:
    return FileReference(name, pid, count, **kw)


def new_table(store: StateStore, name: str = "t", partitions=(ROOT, L, R)) -> str:
    return store.create_table(name, SCHEMA, list(partitions)).table_id


class Mirror:
    """A reader's copy of a table's partitions and references, kept by changes."""

    def __init__(self, store: StateStore, table_id: str) -> None:
        self.store, self.table_id = store, table_id
        self.state = TableState()
        self.token = None
        self.answers: list[TableChanges] = []

    def catch_up(self) -> TableChanges:
        ch = self.store.changes_since(self.table_id, self.token)
        ch.apply_to(self.state)
        self.token = ch.token
        self.answers.append(ch)
        return ch

    def check(self) -> None:
        """The copy equals the state loaded now (partitions and references)."""
        loaded = self.store.load_state(self.table_id)
        assert self.state.partitions == loaded.partitions
        assert self.state.references == loaded.references


def _compaction_history(store: StateStore, table_id: str) -> list:
    left, ll, lr = split_children(L, 0, 50, "LL", "LR")
    return [
        AddFiles((ref("a", "L"), ref("b", "L"), ref("c", "R"), ref("d", ROOT_ID)), T1),
        SplitPartition(left, ll, lr),
        SplitFileReferences((SplitFileReference("a", "L", (
            ref("a", "LL", 6, count_approximate=True, whole_file=False),
            ref("a", "LR", 4, count_approximate=True, whole_file=False))),), T2),
        AssignJobIds((JobAssignment("j1", "L", ("b",)),), T2),
        ReplaceFileReferences("j1", "L", ("b",), ref("b2", "L", 10), T3),
        DeleteFiles(("b",)),
    ]


def test_the_first_answer_is_the_whole_state_with_the_catalog_entry(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("a", "L"), ref("b", "R")), T1))
    m = Mirror(store, table_id)
    ch = m.catch_up()
    assert ch.full and ch.table.table_id == table_id and ch.table.name == "t" and ch.table.schema == SCHEMA
    m.check()


def test_an_unchanged_table_answers_with_no_rows(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("a", "L"),), T1))
    m = Mirror(store, table_id)
    m.catch_up()
    for _ in range(3):
        ch = m.catch_up()
        assert ch.unchanged and ch.partitions == () and ch.references == ()
    m.check()


def test_a_copy_kept_by_changes_equals_the_state_after_every_commit(store):
    table_id = new_table(store)
    m = Mirror(store, table_id)
    m.catch_up()
    for txn in _compaction_history(store, table_id):
        store.commit(table_id, txn)
        ch = m.catch_up()
        assert not ch.full, f"{txn.TYPE} was answered with the whole state"
        m.check()
    assert set(m.state.references) == {("a", "LL"), ("a", "LR"), ("b2", "L"), ("c", "R"), ("d", ROOT_ID)}


def test_changes_name_only_what_changed(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles(tuple(ref(f"f{i}", "L") for i in range(50)), T1))
    m = Mirror(store, table_id)
    m.catch_up()
    store.commit(table_id, AddFiles((ref("new", "R"),), T2))
    ch = m.catch_up()
    assert ch.filenames == {"new"} and [r.filename for r in ch.references] == ["new"]
    assert len(ch.partitions) <= 1
    m.check()


def test_deleted_references_and_partitions_disappear_from_the_copy(store):
    table_id = new_table(store)
    m = Mirror(store, table_id)
    m.catch_up()
    store.commit(table_id, AddFiles((ref("a", "L"), ref("b", "L")), T1))
    m.catch_up()
    store.commit(table_id, AssignJobIds((JobAssignment("j", "L", ("a", "b")),), T2))
    store.commit(table_id, ReplaceFileReferences("j", "L", ("a", "b"), ref("out", "L", 20), T3))
    m.catch_up()
    assert set(m.state.references) == {("out", "L")}
    store.commit(table_id, ClearFiles())
    m.catch_up()
    assert m.state.references == {} and set(m.state.partitions) == {ROOT_ID, "L", "R"}
    m.check()


def test_a_token_many_commits_old_still_catches_up_exactly(store):
    table_id = new_table(store)
    m = Mirror(store, table_id)
    m.catch_up()
    for txn in _compaction_history(store, table_id):
        store.commit(table_id, txn)
    ch = m.catch_up()
    assert not ch.full
    m.check()


def test_every_reader_catches_up_on_its_own_token(store):
    table_id = new_table(store)
    early, late = Mirror(store, table_id), Mirror(store, table_id)
    early.catch_up()
    history = _compaction_history(store, table_id)
    for txn in history[:3]:
        store.commit(table_id, txn)
    late.catch_up()
    for txn in history[3:]:
        store.commit(table_id, txn)
    early.catch_up()
    late.catch_up()
    early.check()
    late.check()


def test_a_foreign_or_meaningless_token_gets_the_whole_state(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("a", "L"),), T1))
    for token in ("nonsense", ("memory", "x", 0), ("dynamodb", 10**9), 42):
        ch = store.changes_since(table_id, token)
        assert ch.full and {r.filename for r in ch.references} == {"a"}


def test_the_answer_carries_changed_properties_and_a_new_name(store):
    table_id = new_table(store)
    m = Mirror(store, table_id)
    m.catch_up()
    store.update_properties("t", {"sleeper.table.online": "false"})
    store.rename_table("t", "t2")
    ch = m.catch_up()
    assert ch.unchanged and ch.table.name == "t2" and not ch.table.online


def test_changes_of_a_deleted_table_are_refused(store):
    table_id = new_table(store)
    m = Mirror(store, table_id)
    m.catch_up()
    store.delete_table("t")
    with pytest.raises(TableNotFoundError):
        m.catch_up()
    with pytest.raises(TableNotFoundError):
        store.changes_since("no-such-id")


def test_tables_do_not_see_each_others_changes(store):
    a = new_table(store, "a")
    b = new_table(store, "b", partitions=(ROOT, L, R))
    ma = Mirror(store, a)
    ma.catch_up()
    store.commit(b, AddFiles((ref("x", "L"),), T1))
    assert ma.catch_up().unchanged
    ma.check()


# ===== PostgreSQL: commits that finish out of order, and the pruned log ==================
@pytest.fixture
def pg_store(pg_dsn):
    from statestore.postgres import PostgresStateStore

    s = PostgresStateStore(pg_dsn)
    yield s
    s.close()


@pytest.mark.integration
def test_postgres_a_commit_that_began_first_and_finished_last_is_not_missed(pg_store, pg_dsn):
    """A commit holding an older transaction id than one a reader has already seen, and
    committing after it, still reaches the reader (a "highest version seen" would skip it)."""
    import psycopg

    table_id = new_table(pg_store)
    m = Mirror(pg_store, table_id)
    m.catch_up()
    with psycopg.connect(pg_dsn) as slow:  # a commit in flight, by hand: its xid is taken first
        slow.execute("INSERT INTO files (table_id, filename, update_time) VALUES (%s, 'slow', 1)", (table_id,))
        slow.execute("INSERT INTO file_references (table_id, filename, partition_id, record_count,"
                     " count_approximate, whole_file, job_id, update_time) VALUES (%s, 'slow', 'L', 5, false, true,"
                     " NULL, 1)", (table_id,))
        slow.execute("INSERT INTO state_changes (table_id, xid, applied_ms, filenames)"
                     " VALUES (%s, pg_current_xact_id(), 0, '{slow}')", (table_id,))
        pg_store.commit(table_id, AddFiles((ref("fast", "R"),), T1))  # a later xid, committed first
        m.catch_up()
        assert set(m.state.references) == {("fast", "R")}
        slow.commit()
    m.catch_up()
    assert set(m.state.references) == {("fast", "R"), ("slow", "L")}
    m.check()


@pytest.mark.integration
def test_postgres_a_reader_behind_the_pruned_log_gets_the_whole_state(pg_store, pg_dsn):
    import psycopg

    from statestore.postgres.changes import prune_changes

    table_id = new_table(pg_store)
    m = Mirror(pg_store, table_id)
    m.catch_up()
    pg_store.commit(table_id, AddFiles((ref("a", "L"),), T1))
    with psycopg.connect(pg_dsn) as conn, conn.cursor() as cur:
        assert prune_changes(cur, table_id, 2**62) == 1
    ch = m.catch_up()
    assert ch.full
    m.check()
    pg_store.commit(table_id, AddFiles((ref("b", "L"),), T2))
    assert not m.catch_up().full  # a reader past the horizon reads increments again
    m.check()


@pytest.mark.integration
def test_postgres_gc_prunes_old_change_log_rows_only(pg_store, pg_dsn):
    import psycopg

    table_id = new_table(pg_store)
    pg_store.commit(table_id, AddFiles((ref("a", "L"),), T1))
    pg_store.commit(table_id, AddFiles((ref("b", "L"),), T1))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE state_changes SET applied_ms = 0 WHERE %s = ANY(filenames)", ("a",))
    pg_store.prune_commit_ids(table_id, 0)
    with psycopg.connect(pg_dsn) as conn:
        left = conn.execute("SELECT filenames FROM state_changes WHERE table_id = %s", (table_id,)).fetchall()
    assert left == [(["b"],)]


def test_the_transaction_number_only_grows_and_covers_every_returned_commit(store: StateStore) -> None:
    tid = new_table(store)
    numbers = [store.transaction_number(tid)]
    for i in range(3):
        store.commit(tid, AddFiles((ref(f"f{i}", "L"),), T1))
        numbers.append(store.transaction_number(tid))
    assert numbers == sorted(numbers) and len(set(numbers)) == 4, f"grows with each commit: {numbers}"
    assert store.transaction_number(tid) == numbers[-1], "no commit: no change"
    store.prune_commit_ids(tid, before_ms=10**15)  # pruning the change log does not move it back
    assert store.transaction_number(tid) >= numbers[-1]
    with pytest.raises(TableNotFoundError):
        store.transaction_number("no-such-table")
