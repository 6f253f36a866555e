"""Model-based test: random sequences of valid and invalid transactions drive each
backend and an independent model side by side.

The model (:mod:`table_model`) is plain dicts written from the transaction rules; it
shares no code with ``statestore`` (no TableState, no ``validate``/``apply``), so the
in-memory backend is tested too, not compared with itself. After every step the
backend's whole state must equal the model's, and a transaction the model refuses must
be refused by the backend with the matching error type. Each Hypothesis example starts
a fresh table.
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
    InMemoryStateStore,
    JobAssignment,
    Partition,
    ReplaceFileReferences,
    Schema,
    SplitFileReference,
    SplitFileReferences,
    SplitPartition,
    StateStore,
    Transaction,
    partitions_from_split_points,
)
from statestore.errors import FileReferenceError, PartitionError
from statestore.partitions import split_children
from statestore.region import Range
from tests.integration.statestore.table_model import Part, Refusal, TableModel, plain_state

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "LongType"}]})
SETTINGS = settings(max_examples=40, stateful_step_count=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
ROOT = partitions_from_split_points(SCHEMA)[0]
REFUSALS = {"file": FileReferenceError, "partition": PartitionError}


class StateStoreMachine(RuleBasedStateMachine):
    """Commits the same transactions to a backend and to the model."""

    store: StateStore  # set by the test before the machine runs

    def __init__(self) -> None:
        super().__init__()
        parts = split_children(ROOT, 0, 0, "left", "right")  # fixed ids
        self.table_name = f"model-{uuid.uuid4().hex[:8]}"
        self.table_id = self.store.create_table(self.table_name, SCHEMA, parts).table_id
        lo = ROOT.region.ranges[0].min
        self.model = TableModel({"root": Part(None, ("left", "right"), False, lo, None),
                                 "left": Part("root", (), True, lo, 0), "right": Part("root", (), True, 0, None)})
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

    def commit(self, txn: Transaction, refusal: Refusal) -> None:
        """Commit ``txn`` to the backend; ``refusal`` is the model's verdict (it has
        already applied ``txn`` to itself when it accepts it)."""
        if refusal is None:
            self.store.commit(self.table_id, txn)
            return
        self.refused += 1
        try:
            self.store.commit(self.table_id, txn)
        except (FileReferenceError, PartitionError) as got:
            assert type(got) is REFUSALS[refusal], f"the model refuses ({refusal}), the backend with {got!r}"
        else:
            raise AssertionError(f"backend accepted a transaction the model refuses ({refusal}): {txn}")

    def filenames(self) -> list[str]:
        return sorted(self.model.files)

    def references(self) -> list[FileReference]:
        return [FileReference(f, p, r.records, r.approximate, r.whole, r.job)
                for (f, p), r in sorted(self.model.refs.items())]

    def partition(self, pid: str) -> Partition:
        """The leaf ``pid`` as a split would plan it."""
        p = self.model.parts[pid]
        return Partition(pid, ROOT.region.with_range(0, Range("key", p.lo, p.hi)), p.parent)

    # ----- rules --------------------------------------------------------------------------
    # Each rule builds a valid transaction, or (with a drawn fault) one the model refuses.
    @staticmethod
    def fault(data: st.DataObject, *faults: str) -> Optional[str]:
        return data.draw(st.sampled_from([None] * (len(faults) + 2) + list(faults)), label="fault")

    @rule(data=st.data())
    def add_files(self, data: st.DataObject) -> None:
        fault = self.fault(data, "tracked", "missing partition", "negative", "job", "duplicate")
        pids = sorted(self.model.parts)
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
        when = self.now()
        verdict = self.model.add_files([(r.filename, r.partition_id, r.record_count, r.count_approximate,
                                         r.whole_file, r.job_id) for r in refs], when)
        self.commit(AddFiles(tuple(refs), when), verdict)

    @precondition(lambda self: len(self.model.parts) < 12)  # keep the tree small: files matter more
    @rule(data=st.data())
    def split_partition(self, data: st.DataObject) -> None:
        fault = self.fault(data, "already split", "child exists", "same child ids")
        candidates = [pid for pid, p in sorted(self.model.parts.items()) if (not p.leaf) == (fault == "already split")]
        if not candidates:
            return
        pid = data.draw(st.sampled_from(candidates), label="partition")
        planned = self.partition(pid)  # as planned while it was a leaf
        r = planned.region.ranges[0]
        lo = max(r.min + 1, -10_000)
        hi = min(r.max - 1 if r.max is not None else 10_000, 10_000)
        if lo > hi:
            return  # no integer strictly inside this partition
        point = data.draw(st.integers(lo, hi), label="split point")
        left_id, right_id = self.fresh("part-"), self.fresh("part-")
        if fault == "child exists":
            right_id = data.draw(st.sampled_from(sorted(self.model.parts)), label="existing id")
        elif fault == "same child ids":
            right_id = left_id
        verdict = self.model.split_partition(pid, point, left_id, right_id)
        self.commit(SplitPartition(*split_children(planned, 0, point, left_id, right_id)), verdict)

    @precondition(lambda self: any(not self.model.parts[p].leaf for _, p in self.model.refs))
    @rule(data=st.data())
    def split_file_references(self, data: st.DataObject) -> None:
        fault = self.fault(data, "from a leaf", "assigned", "no children", "one child twice", "negative")
        refs = [r for r in self.references()
                if (r.job_id is not None) == (fault == "assigned")
                and self.model.parts[r.partition_id].leaf == (fault == "from a leaf")]
        if not refs:
            return
        splits = []
        for ref in data.draw(st.lists(st.sampled_from(refs), min_size=1, max_size=2, unique=True), label="refs"):
            children = list(self.model.parts[ref.partition_id].children)
            if not children:  # from a leaf: push to any other partition
                children = [data.draw(st.sampled_from(sorted(self.model.parts)), label="not a child")]
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
        when = self.now()
        verdict = self.model.split_references(
            [(s.filename, s.from_partition, [(r.partition_id, r.record_count) for r in s.new_references])
             for s in splits], when)
        self.commit(SplitFileReferences(tuple(splits), when), verdict)

    @precondition(lambda self: any(r.job is None for r in self.model.refs.values()))
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
        when = self.now()
        verdict = self.model.assign([(a.job_id, a.partition_id, list(a.filenames)) for a in assignments], when)
        self.commit(AssignJobIds(tuple(assignments), when), verdict)

    @precondition(lambda self: any(r.job for r in self.model.refs.values()))
    @rule(data=st.data())
    def replace_file_references(self, data: st.DataObject) -> None:
        fault = self.fault(data, "wrong job", "output tracked", "output elsewhere", "input not in job",
                           "input twice", "negative")
        jobs = sorted({(r.job, pid) for (_, pid), r in self.model.refs.items() if r.job})
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
            output = replace(output, partition_id=data.draw(st.sampled_from(sorted(set(self.model.parts) - {pid}))))
        elif fault == "input not in job":
            inputs.append(data.draw(st.sampled_from([f for f in self.filenames() if f not in inputs]
                                                    + ["no-such-file"])))
        elif fault == "input twice":
            inputs.append(inputs[0])
        elif fault == "negative":
            output = replace(output, record_count=-1)
        when = self.now()
        verdict = self.model.replace(job, pid, list(inputs), None if output is None else
                                     (output.filename, output.partition_id, output.record_count), when)
        self.commit(ReplaceFileReferences(job, pid, tuple(inputs), output, when), verdict)

    @precondition(lambda self: any(not self.model.referenced(f) for f in self.model.files))
    @rule(data=st.data())
    def delete_files(self, data: st.DataObject) -> None:
        fault = self.fault(data, "referenced", "untracked")
        unreferenced = [f for f in self.filenames() if not self.model.referenced(f)]
        referenced = [f for f in self.filenames() if self.model.referenced(f)]
        names = data.draw(st.lists(st.sampled_from(unreferenced), min_size=1, max_size=3, unique=True))
        if fault == "referenced" and referenced:
            names.append(data.draw(st.sampled_from(referenced)))
        elif fault == "untracked":
            names.append("no-such-file")
        verdict = self.model.delete(list(names))
        self.commit(DeleteFiles(tuple(names)), verdict)

    # ----- checks -------------------------------------------------------------------------
    @invariant()
    def backend_state_equals_the_model(self) -> None:
        assert plain_state(self.store.load_state(self.table_id)) == self.model.plain()

    @invariant()
    def unreferenced_files_agree_with_the_model(self) -> None:
        expected = self.model.unreferenced_before(self.clock)
        assert self.store.unreferenced_files(self.table_id, self.clock, limit=10_000) == expected

    def teardown(self) -> None:
        self.store.delete_table(self.table_name)


def test_backend_follows_the_model_through_random_valid_and_invalid_transactions(store):
    machine = type("Machine", (StateStoreMachine,), {"store": store})
    # the servers' backends share the transaction rules with memory and differ in storage:
    # fewer (slower) examples there
    examples = SETTINGS.max_examples if isinstance(store, InMemoryStateStore) else 15
    run_state_machine_as_test(machine, settings=settings(SETTINGS, max_examples=examples))
