"""Each transaction against the TableState model: what it applies, what it refuses,
and which rows it says it touches (the PostgreSQL backend loads only those)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from statestore import (
    AddFiles,
    AssignJobIds,
    ClearFiles,
    DeleteFiles,
    DropFileReferences,
    FileRecord,
    FileReference,
    FileReferenceError,
    InitialisePartitions,
    JobAssignment,
    Partition,
    PartitionError,
    Range,
    ReplaceFileReferences,
    Schema,
    SplitFileReference,
    SplitFileReferences,
    SplitPartition,
    TableState,
    TransactionError,
    partitions_from_split_points,
)
from statestore.partitions import ROOT_ID, root_region, split_children
from statestore.transactions import Touches

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "LongType"}]})
ROOT_LEAF = Partition(ROOT_ID, root_region(SCHEMA))
ROOT, L, R = split_children(ROOT_LEAF, 0, 100, "L", "R")   # root split at 100 into leaves L, R
T0, T1, T2 = 1_000, 2_000, 3_000


def state(*refs: FileReference) -> TableState:
    """Partitions root -> (L, R) and the given references, added at T0."""
    s = TableState.of([ROOT, L, R])
    if refs:
        commit(s, AddFiles(refs, T0))
    return s


def commit(s: TableState, txn) -> None:
    txn.validate(s)
    txn.apply(s)


def refuses(s: TableState, txn, error: type[TransactionError], match: str) -> None:
    """``txn`` is refused with ``error`` and validation changed nothing."""
    before = s.copy().canonical()
    with pytest.raises(error, match=match):
        txn.validate(s)
    assert s.canonical() == before


def ref(name: str, pid: str, count: int = 10, **kw) -> FileReference:
    return FileReference(name, pid, count, **kw)


# ----- InitialisePartitions ---------------------------------------------------------------
def test_initialise_partitions_replaces_the_whole_tree():
    s = state()
    new = partitions_from_split_points(SCHEMA, [1, 2, 3])
    commit(s, InitialisePartitions(tuple(new)))
    assert s.partitions == {p.id: p for p in new}


def test_initialise_partitions_is_refused_while_the_table_has_files():
    refuses(state(ref("f", "L")), InitialisePartitions((ROOT_LEAF,)), TransactionError, "has 1 files")


def test_initialise_partitions_is_refused_with_an_unreferenced_file_still_tracked():
    s = state()
    s.files["gone"] = FileRecord("gone", T0)
    refuses(s, InitialisePartitions((ROOT_LEAF,)), TransactionError, "has 1 files")


@pytest.mark.parametrize("partitions, message", [
    ((ROOT, L, L, R), "not unique"),
    ((), "expected one root, got 0"),
    ((ROOT_LEAF, replace(ROOT_LEAF, id="other")), "expected one root, got 2"),
    ((ROOT, L, replace(R, parent_id="L")), "not a child of its parent L"),
    ((ROOT, L, replace(R, parent_id="nowhere")), "not a child of its parent nowhere"),
    ((ROOT, replace(L, is_leaf=False), R), "leaf flag disagrees"),
    ((replace(ROOT_LEAF, child_ids=("L", "R")), L, R), "leaf flag disagrees"),
    ((ROOT, L), "missing child R"),
])
def test_initialise_partitions_refuses_a_malformed_tree(partitions, message):
    refuses(TableState(), InitialisePartitions(partitions), PartitionError, message)


def test_initialise_partitions_touches_the_whole_table():
    assert InitialisePartitions((ROOT_LEAF,)).touches() == Touches(whole_table=True)


# ----- SplitPartition ---------------------------------------------------------------------
def split_of_l(point: int = 50, left: str = "LL", right: str = "LR") -> SplitPartition:
    return SplitPartition(*split_children(L, 0, point, left, right))


def test_split_makes_the_leaf_a_parent_of_two_new_leaves():
    s = state()
    commit(s, split_of_l())
    assert not s.partitions["L"].is_leaf and s.partitions["L"].child_ids == ("LL", "LR")
    assert s.partitions["LL"].region.ranges[0] == Range("k", -(2**63), 50)
    assert s.partitions["LR"].region.ranges[0] == Range("k", 50, 100)
    assert s.tree().leaf_for_key((60,)).id == "LR"


def test_split_is_refused_when_parent_already_split():
    s = state()
    commit(s, split_of_l())
    refuses(s, split_of_l(40, "X", "Y"), PartitionError, "L is already split")


def test_split_is_refused_when_the_parent_does_not_exist():
    stray = Partition("nope", L.region, "root")
    refuses(state(), SplitPartition(*split_children(stray, 0, 5, "a", "b")), PartitionError, "nope does not exist")


def test_split_is_refused_when_the_parent_changed_since_it_was_planned():
    stale = replace(L, region=ROOT_LEAF.region)
    refuses(state(), SplitPartition(*split_children(stale, 0, 5, "a", "b")), PartitionError, "has changed")


def test_split_is_refused_when_the_new_parent_does_not_name_both_children():
    txn = split_of_l()
    refuses(state(), replace(txn, parent=replace(txn.parent, child_ids=("LL", "other"))), PartitionError,
            "must name both children")
    refuses(state(), replace(txn, parent=replace(txn.parent, is_leaf=True)), PartitionError, "must name both")


def test_split_is_refused_when_a_child_id_already_exists():
    refuses(state(), split_of_l(50, "R", "LR"), PartitionError, "partition R already exists")


def test_split_is_refused_when_both_children_have_one_id():
    refuses(state(), split_of_l(50, "X", "X"), PartitionError, "both children have id X")


def test_split_is_refused_when_a_child_is_not_a_leaf_under_the_parent():
    txn = split_of_l()
    refuses(state(), replace(txn, left=replace(txn.left, parent_id="R")), PartitionError, "child LL must be a leaf")
    refuses(state(), replace(txn, right=replace(txn.right, is_leaf=False)), PartitionError, "LR must be a leaf")
    refuses(state(), replace(txn, right=replace(txn.right, child_ids=("z",))), PartitionError, "LR must be a leaf")


@pytest.mark.parametrize("left_max, right_min", [(50, 60), (40, 50), (None, 50), (100, 100)])
def test_split_is_refused_when_the_children_do_not_divide_the_parent(left_max, right_min):
    txn = split_of_l()
    left = replace(txn.left, region=txn.left.region.with_range(0, Range("k", -(2**63), left_max)))
    right = replace(txn.right, region=txn.right.region.with_range(0, Range("k", right_min, 100)))
    refuses(state(), replace(txn, left=left, right=right), PartitionError, "do not divide its region")


def test_split_is_refused_on_a_dimension_the_table_does_not_have():
    txn = split_of_l()
    refuses(state(), replace(txn, parent=replace(txn.parent, dimension=3)), PartitionError, "do not divide")


def test_split_touches_the_parent_and_both_children():
    assert split_of_l().touches() == Touches(partition_ids=frozenset({"L", "LL", "LR"}))


# ----- AddFiles ---------------------------------------------------------------------------
def test_add_files_tracks_each_file_and_stamps_references_with_the_commit_time():
    s = state()
    commit(s, AddFiles((ref("a", "L", 5), ref("b", "L", 7, count_approximate=True, whole_file=False),
                        ref("b", "R", 3, whole_file=False)), T1))
    assert s.references[("a", "L")] == FileReference("a", "L", 5, update_time=T1)
    assert s.references[("b", "R")] == FileReference("b", "R", 3, whole_file=False, update_time=T1)
    assert s.references[("b", "L")].count_approximate
    assert s.files == {"a": FileRecord("a", T1), "b": FileRecord("b", T1)}
    assert s.reference_count("b") == 2


def test_add_files_may_reference_a_non_leaf_partition():
    s = state()
    commit(s, AddFiles((ref("a", ROOT_ID),), T1))
    assert ("a", ROOT_ID) in s.references


def test_add_files_touches_the_files_and_their_partitions():
    assert AddFiles((ref("a", "L"), ref("b", "R"))).touches() == Touches(
        partition_ids=frozenset({"L", "R"}), filenames=frozenset({"a", "b"}))


def test_add_files_is_refused_for_a_missing_partition():
    refuses(state(), AddFiles((ref("a", "L"), ref("b", "nope")), T1), PartitionError, "nope does not exist")


def test_add_files_is_refused_for_a_file_already_tracked():
    refuses(state(ref("a", "L")), AddFiles((ref("a", "R"),), T1), FileReferenceError, "a is already tracked")


def test_add_files_is_refused_for_a_file_tracked_without_references():
    s = state()
    s.files["a"] = FileRecord("a", T0)
    refuses(s, AddFiles((ref("a", "R"),), T1), FileReferenceError, "already tracked")


def test_add_files_is_refused_for_a_file_named_twice_in_one_partition():
    refuses(state(), AddFiles((ref("a", "L"), ref("a", "L")), T1), FileReferenceError, "referenced twice")


def test_add_files_is_refused_for_a_reference_carrying_a_job():
    refuses(state(), AddFiles((ref("a", "L", job_id="j"),), T1), FileReferenceError, "cannot carry a job id")


def test_add_files_is_refused_for_a_negative_record_count():
    refuses(state(), AddFiles((ref("a", "L", -1),), T1), FileReferenceError, "negative record count")


# ----- SplitFileReferences ----------------------------------------------------------------
def push_down(name: str, counts=(6, 4), at: int = T1) -> SplitFileReferences:
    return SplitFileReferences((SplitFileReference(name, ROOT_ID, (
        ref(name, "L", counts[0], count_approximate=True, whole_file=False),
        ref(name, "R", counts[1], count_approximate=True, whole_file=False))),), at)


def test_split_file_references_moves_a_reference_to_the_children():
    s = state(ref("a", ROOT_ID, 10))
    commit(s, push_down("a"))
    assert ("a", ROOT_ID) not in s.references
    assert s.references[("a", "L")] == FileReference("a", "L", 6, True, False, None, T1)
    assert s.references[("a", "R")].record_count == 4
    assert s.files["a"] == FileRecord("a", T1)
    assert s.refs_by_file["a"] == {"L", "R"}


def test_split_file_references_clears_any_job_id_on_the_new_references():
    s = state(ref("a", ROOT_ID))
    txn = SplitFileReferences((SplitFileReference("a", ROOT_ID, (ref("a", "L", job_id="j"),)),), T1)
    commit(s, txn)
    assert s.references[("a", "L")].job_id is None


def test_split_file_references_touches_file_parent_and_children():
    assert push_down("a").touches() == Touches(partition_ids=frozenset({ROOT_ID, "L", "R"}),
                                               filenames=frozenset({"a"}))


def test_split_file_references_is_refused_for_a_missing_reference():
    refuses(state(ref("a", "L")), push_down("a"), FileReferenceError, "a has no reference in partition root")


def test_split_file_references_is_refused_for_a_reference_assigned_to_a_job():
    s = state(ref("a", ROOT_ID))
    commit(s, AssignJobIds((JobAssignment("j", ROOT_ID, ("a",)),), T1))
    refuses(s, push_down("a"), FileReferenceError, "assigned to job j")


def test_split_file_references_is_refused_when_a_target_is_not_a_child():
    s = state(ref("a", ROOT_ID))
    txn = SplitFileReferences((SplitFileReference("a", ROOT_ID, (ref("a", ROOT_ID),)),), T1)
    refuses(s, txn, PartitionError, "root is not a child of root")


def test_split_file_references_is_refused_from_a_leaf():
    s = state(ref("a", "L"))
    txn = SplitFileReferences((SplitFileReference("a", "L", (ref("a", "R"),)),), T1)
    refuses(s, txn, PartitionError, "R is not a child of L")


def test_split_file_references_is_refused_when_the_child_already_has_a_reference():
    s = state(ref("a", ROOT_ID), ref("a", "L"))
    refuses(s, push_down("a"), FileReferenceError, "already has a reference in partition L")


def test_split_file_references_is_refused_when_a_new_reference_names_another_file():
    s = state(ref("a", ROOT_ID))
    txn = SplitFileReferences((SplitFileReference("a", ROOT_ID, (ref("b", "L"),)),), T1)
    refuses(s, txn, FileReferenceError, "new reference names b")


def test_split_file_references_is_refused_when_one_reference_is_split_twice():
    s = state(ref("a", ROOT_ID))
    one = SplitFileReference("a", ROOT_ID, (ref("a", "L"),))
    refuses(s, SplitFileReferences((one, one), T1), FileReferenceError, "split twice")


def test_split_file_references_is_refused_with_no_new_references():
    s = state(ref("a", ROOT_ID))
    refuses(s, SplitFileReferences((SplitFileReference("a", ROOT_ID, ()),), T1), FileReferenceError,
            "no new references")


def test_split_file_references_is_refused_with_two_new_references_in_one_child():
    s = state(ref("a", ROOT_ID))
    txn = SplitFileReferences((SplitFileReference("a", ROOT_ID, (ref("a", "L"), ref("a", "L", 3))),), T1)
    refuses(s, txn, FileReferenceError, "two new references in one partition")


def test_split_file_references_is_refused_with_a_negative_record_count():
    refuses(state(ref("a", ROOT_ID)), push_down("a", (5, -1)), FileReferenceError, "negative record count")


# ----- AssignJobIds -----------------------------------------------------------------------
def test_assign_job_ids_marks_references_with_their_job():
    s = state(ref("a", "L"), ref("b", "L"), ref("c", "R"))
    commit(s, AssignJobIds((JobAssignment("j1", "L", ("a", "b")), JobAssignment("j2", "R", ("c",))), T1))
    assert [s.references[(f, p)].job_id for f, p in [("a", "L"), ("b", "L"), ("c", "R")]] == ["j1", "j1", "j2"]
    assert s.references[("a", "L")].update_time == T1
    assert s.files["a"].update_time == T0  # the set of references did not change


def test_assign_job_ids_touches_the_files_and_partitions():
    txn = AssignJobIds((JobAssignment("j1", "L", ("a", "b")),))
    assert txn.touches() == Touches(partition_ids=frozenset({"L"}), filenames=frozenset({"a", "b"}))


def test_assign_job_ids_is_refused_for_a_missing_reference():
    refuses(state(ref("a", "L")), AssignJobIds((JobAssignment("j", "R", ("a",)),), T1), FileReferenceError,
            "a has no reference in partition R")


def test_assign_job_ids_is_refused_when_a_reference_already_has_a_job():
    s = state(ref("a", "L"), ref("b", "L"))
    commit(s, AssignJobIds((JobAssignment("j1", "L", ("a",)),), T1))
    refuses(s, AssignJobIds((JobAssignment("j2", "L", ("b", "a")),), T2), FileReferenceError,
            "already assigned to job j1")


def test_assign_job_ids_is_refused_when_a_reference_is_assigned_twice():
    s = state(ref("a", "L"))
    refuses(s, AssignJobIds((JobAssignment("j1", "L", ("a",)), JobAssignment("j2", "L", ("a",))), T1),
            FileReferenceError, "assigned twice")


# ----- ReplaceFileReferences --------------------------------------------------------------
def assigned(*names: str, job: str = "j", pid: str = "L") -> TableState:
    s = state(*(ref(n, pid) for n in names))
    commit(s, AssignJobIds((JobAssignment(job, pid, names),), T1))
    return s


def test_replace_file_references_swaps_the_inputs_for_the_output():
    s = assigned("a", "b")
    commit(s, ReplaceFileReferences("j", "L", ("a", "b"), ref("out", "L", 20, job_id="ignored"), T2))
    assert set(s.references) == {("out", "L")}
    assert s.references[("out", "L")] == FileReference("out", "L", 20, update_time=T2)
    assert s.files == {"a": FileRecord("a", T2), "b": FileRecord("b", T2), "out": FileRecord("out", T2)}
    assert s.reference_count("a") == 0


def test_replace_file_references_keeps_an_input_s_other_references():
    s = state(ref("a", "L"), ref("x", "L"))
    commit(s, AddFiles((ref("b", "L"), ref("b", "R")), T1))
    commit(s, AssignJobIds((JobAssignment("j", "L", ("a", "b")),), T1))
    commit(s, ReplaceFileReferences("j", "L", ("a", "b"), ref("out", "L", 20), T2))
    assert s.refs_by_file["b"] == {"R"}


def test_replace_file_references_without_output_just_removes_the_inputs():
    s = assigned("a")
    commit(s, ReplaceFileReferences("j", "L", ("a",), None, T2))
    assert s.references == {} and s.files == {"a": FileRecord("a", T2)}


def test_replace_file_references_touches_inputs_output_and_partition():
    txn = ReplaceFileReferences("j", "L", ("a", "b"), ref("out", "L"))
    assert txn.touches() == Touches(partition_ids=frozenset({"L"}), filenames=frozenset({"a", "b", "out"}))
    assert ReplaceFileReferences("j", "L", ("a",), None).touches().filenames == frozenset({"a"})


def test_replace_file_references_is_refused_when_committed_twice():
    s = assigned("a", "b")
    commit(s, ReplaceFileReferences("j", "L", ("a", "b"), ref("out", "L"), T2))
    refuses(s, ReplaceFileReferences("j", "L", ("a", "b"), ref("out2", "L"), T2), FileReferenceError,
            "a has no reference in partition L")


def test_replace_file_references_is_refused_for_an_input_not_assigned_to_the_job():
    s = state(ref("a", "L"))
    refuses(s, ReplaceFileReferences("j", "L", ("a",), ref("out", "L"), T2), FileReferenceError, "to no job")
    s = assigned("a", job="other")
    refuses(s, ReplaceFileReferences("j", "L", ("a",), ref("out", "L"), T2), FileReferenceError, "to job other")


def test_replace_file_references_is_refused_for_a_missing_partition():
    refuses(assigned("a"), ReplaceFileReferences("j", "nope", ("a",), None, T2), PartitionError, "nope")


def test_replace_file_references_is_refused_when_an_input_is_named_twice():
    refuses(assigned("a"), ReplaceFileReferences("j", "L", ("a", "a"), None, T2), FileReferenceError, "named twice")


def test_replace_file_references_is_refused_when_the_output_is_for_another_partition():
    refuses(assigned("a"), ReplaceFileReferences("j", "L", ("a",), ref("out", "R"), T2), FileReferenceError,
            "output reference is for partition R")


def test_replace_file_references_is_refused_when_the_output_is_already_tracked():
    s = assigned("a")
    commit(s, AddFiles((ref("out", "R"),), T1))
    refuses(s, ReplaceFileReferences("j", "L", ("a",), ref("out", "L"), T2), FileReferenceError,
            "output file out is already tracked")
    refuses(s, ReplaceFileReferences("j", "L", ("a",), ref("a", "L"), T2), FileReferenceError, "already tracked")


def test_replace_file_references_is_refused_with_a_negative_output_count():
    refuses(assigned("a"), ReplaceFileReferences("j", "L", ("a",), ref("out", "L", -5), T2), FileReferenceError,
            "negative record count")


# ----- DeleteFiles and ClearFiles ---------------------------------------------------------
def test_delete_files_forgets_unreferenced_files():
    s = assigned("a", "b")
    commit(s, ReplaceFileReferences("j", "L", ("a", "b"), ref("out", "L"), T2))
    commit(s, DeleteFiles(("a", "b")))
    assert set(s.files) == {"out"}


def test_delete_files_touches_only_the_files():
    assert DeleteFiles(("a", "b")).touches() == Touches(filenames=frozenset({"a", "b"}))


def test_delete_files_is_refused_for_an_untracked_file():
    refuses(state(), DeleteFiles(("ghost",)), FileReferenceError, "ghost is not tracked")


def test_delete_files_is_refused_while_a_file_is_referenced():
    s = state(ref("a", "L"), ref("b", "L"))
    commit(s, AddFiles((ref("c", "L"), ref("c", "R")), T1))
    refuses(s, DeleteFiles(("a",)), FileReferenceError, "still referenced by 1 partitions")
    refuses(s, DeleteFiles(("c",)), FileReferenceError, "still referenced by 2 partitions")


def test_drop_file_references_removes_the_references_and_leaves_the_files_awaiting_gc():
    s = state(ref("a", "L"), ref("b", "L"))
    commit(s, AddFiles((ref("c", "L"), ref("c", "R")), T1))
    commit(s, DropFileReferences((("a", "L"), ("c", "L"), ("c", "R")), T2))
    assert sorted(s.references) == [("b", "L")]
    assert s.reference_count("a") == 0 and s.files["a"].update_time == T2 and s.files["c"].update_time == T2
    commit(s, DeleteFiles(("a", "c")))  # now garbage collection's
    assert set(s.files) == {"b"}


def test_drop_file_references_touches_the_files_and_partitions():
    assert DropFileReferences((("a", "L"), ("b", "R"))).touches() == Touches(
        partition_ids=frozenset({"L", "R"}), filenames=frozenset({"a", "b"}))


def test_drop_file_references_is_refused_for_a_missing_or_assigned_reference():
    s = state(ref("a", "L"))
    refuses(s, DropFileReferences((("a", "R"),)), FileReferenceError, "has no reference in partition R")
    refuses(s, DropFileReferences((("a", "L"), ("a", "L"))), FileReferenceError, "named twice")
    commit(s, AssignJobIds((JobAssignment("j", "L", ("a",)),), T1))
    refuses(s, DropFileReferences((("a", "L"),)), FileReferenceError, "assigned to job j")


def test_clear_files_forgets_every_file_and_keeps_partitions():
    s = state(ref("a", "L"), ref("b", "R"))
    s.files["loose"] = FileRecord("loose", T0)
    commit(s, ClearFiles())
    assert s.references == {} and s.files == {} and s.refs_by_file == {}
    assert set(s.partitions) == {ROOT_ID, "L", "R"}
    assert ClearFiles().touches() == Touches(whole_table=True)


# ----- the model itself -------------------------------------------------------------------
def test_copy_is_a_snapshot_unaffected_by_later_changes():
    s = state(ref("a", "L"))
    snap = s.copy()
    commit(s, AddFiles((ref("a2", "L"),), T1))
    commit(s, AssignJobIds((JobAssignment("j", "L", ("a",)),), T1))
    assert set(snap.files) == {"a"} and snap.references[("a", "L")].job_id is None
    assert snap.refs_by_file == {"a": {"L"}}


def test_file_statuses_list_each_file_with_its_references_in_order():
    s = state(ref("b", "R"), ref("b", "L"), ref("a", "L"))
    statuses = s.file_statuses()
    assert [f.filename for f in statuses] == ["a", "b"]
    assert [r.partition_id for r in statuses[1].references] == ["L", "R"]
    assert statuses[0].update_time == T0


def test_canonical_form_ignores_insertion_order():
    a = state(ref("a", "L"), ref("b", "R"))
    b = state(ref("b", "R"), ref("a", "L"))
    assert a.canonical() == b.canonical()
    commit(b, AssignJobIds((JobAssignment("j", "L", ("a",)),), T1))
    assert a.canonical() != b.canonical()
