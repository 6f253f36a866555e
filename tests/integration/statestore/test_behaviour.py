"""One behaviour suite for every StateStore backend (the ``store`` fixture runs each
test on the in-memory store and on PostgreSQL): catalog operations, every
transaction, refusals that change nothing, and unreferenced files by time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from statestore import (
    AddFiles,
    AssignJobIds,
    ClearFiles,
    DeleteFiles,
    FileRecord,
    FileReference,
    FileReferenceError,
    InitialisePartitions,
    JobAssignment,
    Partition,
    PartitionError,
    PropertyError,
    Range,
    ReplaceFileReferences,
    Schema,
    SplitFileReference,
    SplitFileReferences,
    SplitPartition,
    StateStore,
    TableExistsError,
    TableNotFoundError,
    TableState,
    TransactionError,
    partitions_from_split_points,
)
from statestore.partitions import ROOT_ID, root_region, split_children
from statestore.schema import LONG_MAX, LONG_MIN

SCHEMA = Schema.from_dict({
    "rowKeyFields": [{"name": "key", "type": "LongType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "tags", "type": {"MapType": {"keyType": "StringType", "valueType": "LongType"}}},
                    {"name": "hits", "type": {"ListType": {"elementType": "IntType"}}}],
})
ROOT_LEAF = Partition(ROOT_ID, root_region(SCHEMA))
ROOT, L, R = split_children(ROOT_LEAF, 0, 100, "L", "R")
T0, T1, T2, T3 = 1_000, 2_000, 3_000, 4_000


def ref(name: str, pid: str, count: int = 10, **kw) -> FileReference:
    return FileReference(name, pid, count, **kw)


def new_table(store: StateStore, name: str = "t", partitions=(ROOT, L, R), **props) -> str:
    return store.create_table(name, SCHEMA, list(partitions), props or None).table_id


def snapshot(store: StateStore, table_id: str) -> tuple:
    return store.load_state(table_id).canonical()


def assert_refused(store: StateStore, table_id: str, txn, error: type[Exception], match: str) -> None:
    before = snapshot(store, table_id)
    with pytest.raises(error, match=match):
        store.commit(table_id, txn)
    assert snapshot(store, table_id) == before, "a refused transaction changed the state"


def model_after(*txns, partitions=(ROOT, L, R)) -> TableState:
    """The state the model reaches from the given partitions through ``txns``."""
    s = TableState.of(partitions)
    for t in txns:
        t.validate(s)
        t.apply(s)
    return s


# ===== catalog ============================================================================
def test_created_table_is_found_by_name_and_listed(store):
    info = store.create_table("events", SCHEMA, [ROOT, L, R], {"sleeper.table.gc.delay.minutes": "5"})
    assert store.get_table("events") == info
    assert info.schema == SCHEMA and info.properties == {"sleeper.table.gc.delay.minutes": "5"}
    assert store.list_tables() == [info]


def test_tables_are_listed_in_code_point_order_of_their_names(store):
    names = ["b", "B", "a", "é", "ab", "a b", "Z"]
    for n in names:
        new_table(store, n)
    assert [t.name for t in store.list_tables()] == sorted(names)


def test_new_table_holds_its_initial_partitions_and_no_files(store):
    parts = partitions_from_split_points(SCHEMA, [-5, 0, 5, 2**40])
    table_id = new_table(store, partitions=parts)
    state = store.load_state(table_id)
    assert state.partitions == {p.id: p for p in parts}
    assert state.references == {} and state.files == {}
    assert sorted(store.partitions(table_id), key=lambda p: p.id) == sorted(parts, key=lambda p: p.id)


def test_schema_with_bytes_and_string_keys_round_trips_with_its_partitions(store):
    schema = Schema.from_dict({"rowKeyFields": [{"name": "b", "type": "ByteArrayType"},
                                                {"name": "s", "type": "StringType"}],
                               "valueFields": [{"name": "m", "type": {"MapType": {"keyType": "ByteArrayType",
                                                                                  "valueType": "StringType"}}}]})
    parts = partitions_from_split_points(schema, [b"\x00", b"\x7f\xff", b"\x80", b"\xff\xff\x00"])
    root, left, right = split_children(Partition("root", root_region(schema)), 1, "é\u0000x", "l", "r")
    info = store.create_table("bytes", schema, parts)
    info2 = store.create_table("strings", schema, [root, left, right])
    assert store.get_table("bytes").schema == schema
    assert store.load_state(info.table_id).partitions == {p.id: p for p in parts}
    assert store.load_state(info2.table_id).partitions["l"].region.ranges[1].max == "é\u0000x"


def test_extreme_long_key_values_round_trip(store):
    parts = partitions_from_split_points(SCHEMA, [LONG_MIN + 1, -1, LONG_MAX])
    table_id = new_table(store, partitions=parts)
    assert store.load_state(table_id).partitions == {p.id: p for p in parts}


def test_create_is_refused_for_a_name_already_taken_and_the_table_is_unchanged(store):
    first = store.create_table("t", SCHEMA, [ROOT, L, R])
    with pytest.raises(TableExistsError, match="'t' already exists"):
        store.create_table("t", SCHEMA, [ROOT_LEAF])
    assert store.list_tables() == [first]
    assert set(store.load_state(first.table_id).partitions) == {ROOT_ID, "L", "R"}


def test_create_with_an_unknown_property_is_refused_and_creates_nothing(store):
    with pytest.raises(PropertyError, match="sleeper.table.colour"):
        store.create_table("t", SCHEMA, [ROOT_LEAF], {"sleeper.table.colour": "red"})
    assert store.list_tables() == []


def test_create_with_a_malformed_partition_tree_is_refused_and_creates_nothing(store):
    with pytest.raises(PartitionError, match="missing child R"):
        store.create_table("t", SCHEMA, [ROOT, L])
    assert store.list_tables() == []
    with pytest.raises(TableNotFoundError):
        store.get_table("t")


def test_get_of_a_missing_table_is_refused_by_name(store):
    with pytest.raises(TableNotFoundError, match="'nope'"):
        store.get_table("nope")


def test_update_properties_sets_the_given_ones_and_keeps_the_others(store):
    new_table(store, **{"sleeper.table.gc.delay.minutes": "5", "sleeper.table.online": "true"})
    info = store.update_properties("t", {"sleeper.table.online": "false", "sleeper.table.compaction.runner": "spark"})
    assert info.properties == {"sleeper.table.gc.delay.minutes": "5", "sleeper.table.online": "false",
                               "sleeper.table.compaction.runner": "spark"}
    assert store.get_table("t") == info and not info.online


def test_an_empty_value_in_an_update_clears_that_property(store):
    new_table(store, **{"sleeper.table.gc.delay.minutes": "5", "sleeper.table.online": "false"})
    info = store.update_properties("t", {"sleeper.table.gc.delay.minutes": "", "sleeper.table.iterator.python": "",
                                         "sleeper.table.compaction.runner": "spark"})
    assert info.properties == {"sleeper.table.online": "false", "sleeper.table.compaction.runner": "spark"}
    assert store.get_table("t") == info


def test_update_properties_with_a_bad_value_is_refused_and_changes_nothing(store):
    new_table(store)
    before = store.get_table("t")
    with pytest.raises(PropertyError, match="sleeper.table.online"):
        store.update_properties("t", {"sleeper.table.gc.delay.minutes": "7", "sleeper.table.online": "maybe"})
    assert store.get_table("t") == before


def test_update_properties_of_a_missing_table_is_refused(store):
    with pytest.raises(TableNotFoundError):
        store.update_properties("nope", {"sleeper.table.online": "false"})


def test_rename_moves_the_name_and_keeps_the_id_schema_and_state(store):
    info = store.create_table("old", SCHEMA, [ROOT, L, R], {"sleeper.table.online": "false"})
    store.commit(info.table_id, AddFiles((ref("f", "L"),), T1))
    renamed = store.rename_table("old", "new")
    assert (renamed.table_id, renamed.schema, renamed.properties) == (info.table_id, info.schema, info.properties)
    assert renamed.name == "new" and store.get_table("new") == renamed
    with pytest.raises(TableNotFoundError):
        store.get_table("old")
    assert set(store.load_state(info.table_id).files) == {"f"}


def test_rename_is_refused_when_the_new_name_is_taken_and_changes_nothing(store):
    a, b = new_table(store, "a"), new_table(store, "b")
    with pytest.raises(TableExistsError, match="'b' already exists"):
        store.rename_table("a", "b")
    assert [(t.name, t.table_id) for t in store.list_tables()] == [("a", a), ("b", b)]


def test_rename_to_its_own_name_is_refused_as_taken(store):
    new_table(store, "a")
    with pytest.raises(TableExistsError):
        store.rename_table("a", "a")


def test_rename_of_a_missing_table_is_refused(store):
    new_table(store, "b")
    with pytest.raises(TableNotFoundError, match="'a'"):
        store.rename_table("a", "b")


def test_delete_removes_the_table_and_all_its_state_but_no_other_table_s(store):
    doomed, kept = new_table(store, "doomed"), new_table(store, "kept")
    for table_id in (doomed, kept):
        store.commit(table_id, AddFiles((ref("shared-name", "L"), ref("only", "R")), T1))
    info = store.delete_table("doomed")
    assert info.table_id == doomed
    assert [t.name for t in store.list_tables()] == ["kept"]
    for call in (lambda: store.load_state(doomed), lambda: store.unreferenced_files(doomed, T3),
                 lambda: store.commit(doomed, AddFiles((ref("g", "L"),), T2)),
                 lambda: store.partitions(doomed), lambda: store.file_references(doomed)):
        with pytest.raises(TableNotFoundError):
            call()
    assert set(store.load_state(kept).files) == {"shared-name", "only"}


def test_a_deleted_name_can_be_reused_and_starts_empty(store):
    old = new_table(store)
    store.commit(old, AddFiles((ref("f", "L"),), T1))
    store.delete_table("t")
    new = new_table(store)
    assert new != old
    assert store.load_state(new).files == {}


def test_delete_of_a_missing_table_is_refused(store):
    with pytest.raises(TableNotFoundError):
        store.delete_table("nope")


# ===== transactions =======================================================================
def test_added_files_are_tracked_with_their_references_stamped_with_the_commit_time(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("a", "L", 5), ref("b", "L", 7, count_approximate=True, whole_file=False),
                                     ref("b", "R", 3, whole_file=False)), T1))
    state = store.load_state(table_id)
    assert state.references == {
        ("a", "L"): FileReference("a", "L", 5, update_time=T1),
        ("b", "L"): FileReference("b", "L", 7, True, False, None, T1),
        ("b", "R"): FileReference("b", "R", 3, False, False, None, T1),
    }
    assert state.files == {"a": FileRecord("a", T1), "b": FileRecord("b", T1)}
    assert state.refs_by_file == {"a": {"L"}, "b": {"L", "R"}}
    assert sorted(store.file_references(table_id), key=repr) == sorted(state.references.values(), key=repr)
    assert store.file_statuses(table_id) == state.file_statuses()


def test_add_files_with_one_bad_reference_adds_nothing(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("old", "L"),), T1))
    txn = AddFiles((*tuple(ref(f"new{i}", "L") for i in range(5)), ref("old", "R")), T2)
    assert_refused(store, table_id, txn, FileReferenceError, "old is already tracked")
    txn = AddFiles((ref("x", "L"), ref("y", "missing")), T2)
    assert_refused(store, table_id, txn, PartitionError, "missing does not exist")


def test_split_partition_creates_two_leaves_under_the_old_leaf(store):
    table_id = new_table(store)
    txn = SplitPartition(*split_children(L, 0, 50, "LL", "LR"))
    store.commit(table_id, txn)
    assert store.load_state(table_id).canonical() == model_after(txn).canonical()
    tree = store.load_state(table_id).tree()
    assert tree.leaf_for_key((49,)).id == "LL" and tree.leaf_for_key((50,)).id == "LR"


def test_split_is_refused_when_parent_already_split(store):
    table_id = new_table(store)
    store.commit(table_id, SplitPartition(*split_children(L, 0, 50, "LL", "LR")))
    assert_refused(store, table_id, SplitPartition(*split_children(L, 0, 10, "X", "Y")), PartitionError,
                   "L is already split")


def test_split_is_refused_when_planned_against_a_partition_that_changed(store):
    table_id = new_table(store)
    stale = replace(L, region=ROOT_LEAF.region)
    assert_refused(store, table_id, SplitPartition(*split_children(stale, 0, 50, "X", "Y")), PartitionError,
                   "changed")


def test_references_pushed_down_move_to_both_children(store):
    table_id = new_table(store)
    add = AddFiles((ref("a", ROOT_ID, 10),), T1)
    push = SplitFileReferences((SplitFileReference("a", ROOT_ID, (
        ref("a", "L", 6, count_approximate=True, whole_file=False),
        ref("a", "R", 4, count_approximate=True, whole_file=False))),), T2)
    store.commit(table_id, add)
    store.commit(table_id, push)
    state = store.load_state(table_id)
    assert state.canonical() == model_after(add, push).canonical()
    assert set(state.references) == {("a", "L"), ("a", "R")} and state.files["a"].update_time == T2


def test_compaction_assigns_jobs_then_replaces_inputs_with_the_output(store):
    table_id = new_table(store)
    txns = [AddFiles((ref("a", "L"), ref("b", "L"), ref("c", "R")), T1),
            AssignJobIds((JobAssignment("j1", "L", ("a", "b")),), T2),
            ReplaceFileReferences("j1", "L", ("a", "b"), ref("out", "L", 20), T3)]
    for t in txns:
        store.commit(table_id, t)
    state = store.load_state(table_id)
    assert state.canonical() == model_after(*txns).canonical()
    assert set(state.references) == {("out", "L"), ("c", "R")}
    assert state.files["a"] == FileRecord("a", T3) and state.reference_count("a") == 0


def test_duplicate_compaction_commit_is_refused_and_changes_nothing(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("a", "L"), ref("b", "L")), T1))
    store.commit(table_id, AssignJobIds((JobAssignment("j1", "L", ("a", "b")),), T2))
    store.commit(table_id, ReplaceFileReferences("j1", "L", ("a", "b"), ref("out", "L", 20), T3))
    assert_refused(store, table_id, ReplaceFileReferences("j1", "L", ("a", "b"), ref("out-again", "L", 20), T3),
                   FileReferenceError, "no reference")


def test_job_assignment_is_refused_for_a_reference_already_assigned(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("a", "L"), ref("b", "L")), T1))
    store.commit(table_id, AssignJobIds((JobAssignment("j1", "L", ("a",)),), T2))
    assert_refused(store, table_id, AssignJobIds((JobAssignment("j2", "L", ("b", "a")),), T3), FileReferenceError,
                   "already assigned to job j1")


def test_unreferenced_files_can_be_deleted_but_referenced_ones_cannot(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("a", "L"), ref("b", "L")), T1))
    store.commit(table_id, AssignJobIds((JobAssignment("j", "L", ("a",)),), T1))
    store.commit(table_id, ReplaceFileReferences("j", "L", ("a",), ref("out", "L"), T2))
    assert_refused(store, table_id, DeleteFiles(("a", "b")), FileReferenceError, "b is still referenced")
    assert_refused(store, table_id, DeleteFiles(("ghost",)), FileReferenceError, "ghost is not tracked")
    store.commit(table_id, DeleteFiles(("a",)))
    assert set(store.load_state(table_id).files) == {"b", "out"}


def test_clear_files_forgets_all_files_and_keeps_the_partitions(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("a", "L"), ref("b", "R"), ref("c", ROOT_ID)), T1))
    store.commit(table_id, ClearFiles())
    state = store.load_state(table_id)
    assert state.files == {} and state.references == {} and set(state.partitions) == {ROOT_ID, "L", "R"}


def test_partitions_can_be_reinitialised_only_while_the_table_has_no_files(store):
    table_id = new_table(store)
    new_tree = partitions_from_split_points(SCHEMA, [1, 2, 3])
    store.commit(table_id, InitialisePartitions(tuple(new_tree)))
    assert store.load_state(table_id).partitions == {p.id: p for p in new_tree}
    leaf = new_tree[-1].id
    store.commit(table_id, AddFiles((ref("a", leaf),), T1))
    assert_refused(store, table_id, InitialisePartitions((ROOT_LEAF,)), TransactionError, "has 1 files")


_XY = split_children(R, 0, 200, "X", "Y")


@pytest.mark.parametrize("bad, error, match", [
    (AddFiles((ref("a", "L"),), T3), FileReferenceError, "already tracked"),
    (AddFiles((ref("n", "L", job_id="j"),), T3), FileReferenceError, "job id"),
    (SplitPartition(_XY[0], replace(_XY[1], region=_XY[1].region.with_range(0, Range("key", 100, 300))), _XY[2]),
     PartitionError, "do not divide"),
    (SplitFileReferences((SplitFileReference("a", "L", (ref("a", "R"),)),), T3), FileReferenceError,
     "assigned to job"),
    (SplitFileReferences((SplitFileReference("c", ROOT_ID, (ref("c", "L"),)),), T3), FileReferenceError,
     "c has no reference"),
    (AssignJobIds((JobAssignment("j2", "R", ("a",)),), T3), FileReferenceError, "no reference in partition R"),
    (ReplaceFileReferences("other", "L", ("a",), ref("o", "L"), T3), FileReferenceError, "assigned to job j"),
    (ReplaceFileReferences("j", "L", ("a",), ref("b", "L"), T3), FileReferenceError, "already tracked"),
    (ReplaceFileReferences("j", "L", ("a", "b"), ref("o", "L"), T3), FileReferenceError, "b in partition L"),
    (DeleteFiles(("a",)), FileReferenceError, "still referenced"),
    (InitialisePartitions((ROOT_LEAF,)), TransactionError, "files"),
], ids=lambda v: v.TYPE if hasattr(v, "TYPE") else None)
def test_every_refused_transaction_leaves_the_state_unchanged(store, bad, error, match):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("a", "L"), ref("b", "L"), ref("c", "R")), T1))
    store.commit(table_id, AssignJobIds((JobAssignment("j", "L", ("a",)),), T2))
    assert_refused(store, table_id, bad, error, match)


def test_commit_to_an_unknown_table_id_is_refused(store):
    with pytest.raises(TableNotFoundError, match="no table with id"):
        store.commit("no-such-id", AddFiles((ref("a", "L"),), T1))
    with pytest.raises(TableNotFoundError):
        store.load_state("no-such-id")


def test_thousands_of_files_in_one_commit_are_applied_exactly(store):
    # crosses the PostgreSQL backend's COPY threshold both ways
    table_id = new_table(store)
    add = AddFiles(tuple(ref(f"f{i:05d}", "L" if i % 2 else "R", i) for i in range(5000)), T1)
    names = tuple(f"f{i:05d}" for i in range(1, 5000, 2))
    assign = AssignJobIds((JobAssignment("big", "L", names),), T2)
    compact = ReplaceFileReferences("big", "L", names, ref("merged", "L", 99), T3)
    for t in (add, assign, compact):
        store.commit(table_id, t)
    assert store.load_state(table_id).canonical() == model_after(add, assign, compact).canonical()
    assert len(store.unreferenced_files(table_id, T3 + 1, limit=10_000)) == 2500
    store.commit(table_id, DeleteFiles(names))
    store.commit(table_id, ClearFiles())
    assert store.load_state(table_id).files == {}


def test_tables_keep_separate_files_of_the_same_name(store):
    a, b = new_table(store, "a"), new_table(store, "b")
    store.commit(a, AddFiles((ref("same", "L", 1),), T1))
    store.commit(b, AddFiles((ref("same", "R", 2),), T2))
    assert store.load_state(a).references == {("same", "L"): FileReference("same", "L", 1, update_time=T1)}
    assert store.load_state(b).references == {("same", "R"): FileReference("same", "R", 2, update_time=T2)}


def test_loaded_state_is_a_snapshot_unaffected_by_later_commits(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("a", "L"),), T1))
    snap = store.load_state(table_id)
    store.commit(table_id, AddFiles((ref("b", "L"),), T2))
    snap.files.clear()  # and changing the snapshot does not change the store
    assert set(store.load_state(table_id).files) == {"a", "b"}


# ===== unreferenced files =================================================================
def test_unreferenced_files_are_those_without_references_unchanged_before_the_time(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("é", "L"), ref("B", "L"), ref("a", "L"), ref("kept", "R")), T1))
    store.commit(table_id, AssignJobIds((JobAssignment("j", "L", ("é", "B", "a")),), T1))
    store.commit(table_id, ReplaceFileReferences("j", "L", ("é", "B", "a"), ref("out", "L"), T2))
    assert store.unreferenced_files(table_id, T1) == []
    assert store.unreferenced_files(table_id, T2) == []  # changed at T2: not before T2
    assert store.unreferenced_files(table_id, T2 + 1) == ["B", "a", "é"]  # code point order
    assert store.unreferenced_files(table_id, T2 + 1, limit=2) == ["B", "a"]
    store.commit(table_id, DeleteFiles(("a",)))
    assert store.unreferenced_files(table_id, T3) == ["B", "é"]


def test_a_file_whose_references_were_all_pushed_down_is_still_referenced(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("a", ROOT_ID),), T1))
    store.commit(table_id, SplitFileReferences((SplitFileReference("a", ROOT_ID, (ref("a", "L"), ref("a", "R"))),),
                                               T2))
    assert store.unreferenced_files(table_id, T3) == []


def test_a_file_loses_its_last_reference_only_when_every_partition_has_compacted_it(store):
    table_id = new_table(store)
    store.commit(table_id, AddFiles((ref("shared", "L"), ref("shared", "R")), T1))
    store.commit(table_id, AssignJobIds((JobAssignment("jl", "L", ("shared",)),
                                         JobAssignment("jr", "R", ("shared",))), T1))
    store.commit(table_id, ReplaceFileReferences("jl", "L", ("shared",), ref("outl", "L"), T2))
    assert store.unreferenced_files(table_id, T3) == []
    store.commit(table_id, ReplaceFileReferences("jr", "R", ("shared",), ref("outr", "R"), T3))
    assert store.unreferenced_files(table_id, T3) == []
    assert store.unreferenced_files(table_id, T3 + 1) == ["shared"]


def test_an_update_making_the_properties_unsafe_together_is_refused_and_changes_nothing(store):
    new_table(store, **{"sleeper.table.compaction.job.retry.minutes": "5"})
    store.update_properties("t", {"sleeper.table.gc.orphan.grace.minutes": "20"})  # 20 > 5: fine
    with pytest.raises(PropertyError, match="longer than"):
        store.update_properties("t", {"sleeper.table.compaction.job.retry.minutes": "25"})
    assert store.get_table("t").properties == {"sleeper.table.compaction.job.retry.minutes": "5",
                                               "sleeper.table.gc.orphan.grace.minutes": "20"}


def test_the_overview_matches_one_computed_from_the_whole_state(store):
    """Model-based: a backend's overview (PostgreSQL: aggregate queries) against the pure
    definition applied to the whole state."""
    from statestore.overview import overview_of

    tid = new_table(store)
    store.commit(tid, AddFiles((ref("f1", "L", 10), ref("f2", "R", 7), ref("f3", "L", 5))))
    store.commit(tid, AssignJobIds((JobAssignment("j", "L", ("f1", "f3")),)))
    store.commit(tid, ReplaceFileReferences("j", "L", ("f1", "f3"), ref("f4", "L", 15)))
    store.commit(tid, AddFiles((FileReference("big", ROOT.id, 100, count_approximate=True),)))
    for limit in (0, 2, 500):
        assert store.overview(tid, file_limit=limit) == overview_of(store.load_state(tid), limit)
    o = store.overview(tid)
    assert (o.files, o.references, o.unreferenced, o.records, o.leaves) == (5, 3, 2, 122, 2)
