"""Model-based test: random sequences of valid and invalid transactions drive each
backend and the in-memory TableState model side by side.

After every step the backend's whole state must equal the model's, and a transaction
the model refuses must be refused by the backend with the same error type. Each
Hypothesis example starts a fresh table.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Optional

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from statestore import (
    AddFiles,
    AssignJobIds,
    DeleteFiles,
    FileReference,
    JobAssignment,
    Partition,
    ReplaceFileReferences,
    Schema,
    SplitFileReference,
    SplitFileReferences,
    SplitPartition,
    StateStore,
    TableState,
    Transaction,
    TransactionError,
    partitions_from_split_points,
)
from statestore.partitions import split_children

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "LongType"}]})
SETTINGS = settings(max_examples=40, stateful_step_count=30, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


class StateStoreMachine(RuleBasedStateMachine):
    """Commits the same transactions to a backend and to the model."""

    store: StateStore  # set by the test before the machine runs

    def __init__(self) -> None:
        super().__init__()
        parts = split_children(partitions_from_split_points(SCHEMA)[0], 0, 0, "left", "right")  # fixed ids
        self.table_name = f"model-{uuid.uuid4().hex[:8]}"
        self.table_id = self.store.create_table(self.table_name, SCHEMA, parts).table_id
        self.model = TableState.of(parts)
        self.clock = 1_000
        self.serial = 0
        self.refused = 0

    # ----- helpers ------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def now(self) -> int:
        self.clock += 7
        return self.clock

    def commit(self, txn: Transaction) -> None:
        expected = self.model.copy()
        try:
            txn.validate(expected)
        except TransactionError as e:
            self.refused += 1
            try:
                self.store.commit(self.table_id, txn)
            except TransactionError as got:
                assert type(got) is type(e), f"model refused with {e!r}, backend with {got!r}"
            else:
                raise AssertionError(f"backend accepted a transaction the model refuses: {e}")
            return
        txn.apply(expected)
        self.store.commit(self.table_id, txn)
        self.model = expected

    def filenames(self) -> list[str]:
        return sorted(self.model.files)

    def references(self) -> list[FileReference]:
        return sorted(self.model.references.values(), key=lambda r: (r.filename, r.partition_id))

    # ----- rules --------------------------------------------------------------------------
    # Each rule builds a valid transaction, or (with a drawn fault) one the model refuses.
    @staticmethod
    def fault(data: st.DataObject, *faults: str) -> Optional[str]:
        return data.draw(st.sampled_from([None] * (len(faults) + 2) + list(faults)), label="fault")

    @rule(data=st.data())
    def add_files(self, data: st.DataObject) -> None:
        fault = self.fault(data, "tracked", "missing partition", "negative", "job", "duplicate")
        pids = sorted(self.model.partitions)
        refs = []
        for _ in range(data.draw(st.integers(1, 3), label="files")):
            name = self.fresh("file-")
            for pid in data.draw(st.lists(st.sampled_from(pids), min_size=1, max_size=2, unique=True)):
                refs.append(FileReference(name, pid, data.draw(st.integers(0, 1000), label="records"),
                                          data.draw(st.booleans()), data.draw(st.booleans())))
        first = refs[0]
        if fault == "tracked" and self.model.files:
            refs[0] = replace(first, filename=data.draw(st.sampled_from(self.filenames())))
        elif fault == "missing partition":
            refs.append(replace(first, partition_id="no-such-partition"))
        elif fault == "negative":
            refs[0] = replace(first, record_count=-1)
        elif fault == "job":
            refs[0] = replace(first, job_id="job")
        elif fault == "duplicate":
            refs.append(first)
        self.commit(AddFiles(tuple(refs), self.now()))

    @precondition(lambda self: len(self.model.partitions) < 12)  # keep the tree small: files matter more
    @rule(data=st.data())
    def split_partition(self, data: st.DataObject) -> None:
        fault = self.fault(data, "already split", "child exists", "same child ids")
        parts = sorted(self.model.partitions.values(), key=lambda p: p.id)
        candidates = [p for p in parts if (not p.is_leaf) == (fault == "already split")]
        if not candidates:
            return
        p = data.draw(st.sampled_from(candidates), label="partition")
        planned = Partition(p.id, p.region, p.parent_id)  # as planned while it was a leaf
        r = planned.region.ranges[0]
        lo = max(r.min + 1, -10_000)
        hi = min(r.max - 1 if r.max is not None else 10_000, 10_000)
        if lo > hi:
            return  # no integer strictly inside this partition
        point = data.draw(st.integers(lo, hi), label="split point")
        left_id, right_id = self.fresh("part-"), self.fresh("part-")
        if fault == "child exists":
            right_id = data.draw(st.sampled_from(sorted(self.model.partitions)), label="existing id")
        elif fault == "same child ids":
            right_id = left_id
        self.commit(SplitPartition(*split_children(planned, 0, point, left_id, right_id)))

    @precondition(lambda self: any(not self.model.partitions[p].is_leaf for _, p in self.model.references))
    @rule(data=st.data())
    def split_file_references(self, data: st.DataObject) -> None:
        fault = self.fault(data, "from a leaf", "assigned", "no children", "one child twice", "negative")
        refs = [r for r in self.references()
                if (r.job_id is not None) == (fault == "assigned")
                and self.model.partitions[r.partition_id].is_leaf == (fault == "from a leaf")]
        if not refs:
            return
        splits = []
        for ref in data.draw(st.lists(st.sampled_from(refs), min_size=1, max_size=2, unique=True), label="refs"):
            children = list(self.model.partitions[ref.partition_id].child_ids)
            if not children:  # from a leaf: push to any other partition
                children = [data.draw(st.sampled_from(sorted(self.model.partitions)), label="not a child")]
            chosen = data.draw(st.lists(st.sampled_from(children), min_size=1, max_size=2, unique=True))
            if fault == "no children":
                chosen = []
            elif fault == "one child twice":
                chosen = [chosen[0], chosen[0]]
            new = [FileReference(ref.filename, c, data.draw(st.integers(0, ref.record_count)), True, False)
                   for c in chosen]
            if fault == "negative":
                new[0] = replace(new[0], record_count=-1)
            splits.append(SplitFileReference(ref.filename, ref.partition_id, tuple(new)))
        self.commit(SplitFileReferences(tuple(splits), self.now()))

    @precondition(lambda self: any(r.job_id is None for r in self.model.references.values()))
    @rule(data=st.data())
    def assign_job_ids(self, data: st.DataObject) -> None:
        fault = self.fault(data, "already assigned", "missing file", "assigned twice")
        free = [r for r in self.references() if r.job_id is None]
        if not free:
            return
        pid = data.draw(st.sampled_from(sorted({r.partition_id for r in free})), label="partition")
        names = data.draw(st.lists(st.sampled_from([r.filename for r in free if r.partition_id == pid]),
                                   min_size=1, max_size=3, unique=True), label="files")
        assignments = [JobAssignment(self.fresh("job-"), pid, tuple(names))]
        taken = [r for r in self.references() if r.job_id is not None]
        if fault == "already assigned" and taken:
            r = data.draw(st.sampled_from(taken))
            assignments.append(JobAssignment(self.fresh("job-"), r.partition_id, (r.filename,)))
        elif fault == "missing file":
            assignments[0] = JobAssignment(assignments[0].job_id, pid, (*tuple(names), "no-such-file"))
        elif fault == "assigned twice":
            assignments.append(JobAssignment(self.fresh("job-"), pid, (names[0],)))
        self.commit(AssignJobIds(tuple(assignments), self.now()))

    @precondition(lambda self: any(r.job_id for r in self.model.references.values()))
    @rule(data=st.data())
    def replace_file_references(self, data: st.DataObject) -> None:
        fault = self.fault(data, "wrong job", "output tracked", "output elsewhere", "input not in job",
                           "input twice", "negative")
        jobs = sorted({(r.job_id, r.partition_id) for r in self.model.references.values() if r.job_id})
        if not jobs:
            return
        job, pid = data.draw(st.sampled_from(jobs), label="job")
        inputs = [r.filename for r in self.references() if r.job_id == job and r.partition_id == pid]
        output: Optional[FileReference] = None
        if data.draw(st.integers(0, 4), label="no output") or fault:
            output = FileReference(self.fresh("out-"), pid, data.draw(st.integers(0, 5000), label="records"))
        if fault == "wrong job":
            job = "wrong-job"
        elif fault == "output tracked":
            output = replace(output, filename=data.draw(st.sampled_from(self.filenames())))
        elif fault == "output elsewhere":
            output = replace(output, partition_id=data.draw(st.sampled_from(sorted(set(self.model.partitions)
                                                                                 - {pid}))))
        elif fault == "input not in job":
            inputs.append(data.draw(st.sampled_from([f for f in self.filenames() if f not in inputs]
                                                    + ["no-such-file"])))
        elif fault == "input twice":
            inputs.append(inputs[0])
        elif fault == "negative":
            output = replace(output, record_count=-1)
        self.commit(ReplaceFileReferences(job, pid, tuple(inputs), output, self.now()))

    @precondition(lambda self: any(not self.model.reference_count(f) for f in self.model.files))
    @rule(data=st.data())
    def delete_files(self, data: st.DataObject) -> None:
        fault = self.fault(data, "referenced", "untracked")
        unreferenced = [f for f in self.filenames() if not self.model.reference_count(f)]
        referenced = [f for f in self.filenames() if self.model.reference_count(f)]
        names = data.draw(st.lists(st.sampled_from(unreferenced), min_size=1, max_size=3, unique=True))
        if fault == "referenced" and referenced:
            names.append(data.draw(st.sampled_from(referenced)))
        elif fault == "untracked":
            names.append("no-such-file")
        self.commit(DeleteFiles(tuple(names)))

    # ----- checks -------------------------------------------------------------------------
    @invariant()
    def backend_state_equals_the_model(self) -> None:
        assert self.store.load_state(self.table_id).canonical() == self.model.canonical()

    @invariant()
    def unreferenced_files_agree_with_the_model(self) -> None:
        expected = sorted(f.filename for f in self.model.files.values()
                          if not self.model.reference_count(f.filename) and f.update_time < self.clock)
        assert self.store.unreferenced_files(self.table_id, self.clock, limit=10_000) == expected

    def teardown(self) -> None:
        self.store.delete_table(self.table_name)


def test_backend_follows_the_model_through_random_valid_and_invalid_transactions(store):
    machine = type("Machine", (StateStoreMachine,), {"store": store})
    run_state_machine_as_test(machine, settings=SETTINGS)
