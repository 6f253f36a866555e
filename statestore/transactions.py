"""State changes as data: frozen, serialisable transactions.

Each transaction validates against a :class:`TableState` (raising a
:class:`TransactionError` subclass and changing nothing when invalid) and applies to
it. Every backend gives the same semantics:

* the in-memory backend validates and applies to its state under a lock;
* the PostgreSQL backend loads only the rows named by :meth:`Transaction.touches`
  into a fragment, validates and applies there, and writes the difference, inside
  one serializable database transaction; so a commit costs O(size of the change).

Transactions serialise to JSON-friendly dicts tagged with ``type``
(:func:`transaction_to_dict`, :func:`transaction_from_dict`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Optional

from statestore.errors import FileReferenceError, PartitionError, TransactionError
from statestore.files import FileRecord, FileReference
from statestore.partitions import Partition
from statestore.region import Range
from statestore.state import TableState


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Touches:
    """The rows a transaction reads or writes: partitions by id, files by name.

    ``whole_table`` asks for the full state (initialising partitions, clearing files).
    Loading a file loads its record and all its references.
    """

    partition_ids: frozenset[str] = frozenset()
    filenames: frozenset[str] = frozenset()
    whole_table: bool = False


class Transaction:
    """Base of all transactions. Subclasses are frozen dataclasses with a TYPE tag."""

    TYPE: ClassVar[str] = ""

    def touches(self) -> Touches:
        raise NotImplementedError

    def validate(self, state: TableState) -> None:
        raise NotImplementedError

    def apply(self, state: TableState) -> None:
        """Apply to ``state``; call only after :meth:`validate` passed."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError


def _require_partition(state: TableState, pid: str) -> Partition:
    p = state.partitions.get(pid)
    if p is None:
        raise PartitionError(f"partition {pid} does not exist")
    return p


def _require_reference(state: TableState, filename: str, pid: str) -> FileReference:
    ref = state.references.get((filename, pid))
    if ref is None:
        raise FileReferenceError(f"file {filename} has no reference in partition {pid}")
    return ref


def _touch_file(state: TableState, filename: str, when: int) -> None:
    state.files[filename] = FileRecord(filename, when)


# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InitialisePartitions(Transaction):
    """Replace the whole partition tree. Refused while the table has any files."""

    TYPE: ClassVar[str] = "initialise_partitions"
    partitions: tuple[Partition, ...]

    def touches(self) -> Touches:
        return Touches(whole_table=True)

    def validate(self, state: TableState) -> None:
        if state.files:
            raise TransactionError(f"cannot initialise partitions: the table has {len(state.files)} files")
        ids = [p.id for p in self.partitions]
        if len(set(ids)) != len(ids):
            raise PartitionError("initialise partitions: partition ids are not unique")
        roots = [p for p in self.partitions if p.parent_id is None]
        if len(roots) != 1:
            raise PartitionError(f"initialise partitions: expected one root, got {len(roots)}")
        by_id = {p.id: p for p in self.partitions}
        for p in self.partitions:
            if p.parent_id is not None and p.id not in by_id.get(p.parent_id, p).child_ids:
                raise PartitionError(f"partition {p.id} is not a child of its parent {p.parent_id}")
            if p.is_leaf != (not p.child_ids):
                raise PartitionError(f"partition {p.id}: leaf flag disagrees with its children")
            for c in p.child_ids:
                if c not in by_id:
                    raise PartitionError(f"partition {p.id} names a missing child {c}")

    def apply(self, state: TableState) -> None:
        state.partitions = {p.id: p for p in self.partitions}

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.TYPE, "partitions": [p.to_dict() for p in self.partitions]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InitialisePartitions:
        return cls(tuple(Partition.from_dict(p) for p in d["partitions"]))


@dataclass(frozen=True)
class SplitPartition(Transaction):
    """Split a leaf into two children, atomically; refused if it is no longer a leaf."""

    TYPE: ClassVar[str] = "split_partition"
    parent: Partition
    left: Partition
    right: Partition

    def touches(self) -> Touches:
        return Touches(partition_ids=frozenset({self.parent.id, self.left.id, self.right.id}))

    def validate(self, state: TableState) -> None:
        current = _require_partition(state, self.parent.id)
        if not current.is_leaf:
            raise PartitionError(f"partition {self.parent.id} is already split")
        if current.region != self.parent.region or current.parent_id != self.parent.parent_id:
            raise PartitionError(f"partition {self.parent.id} has changed since the split was planned")
        if self.parent.is_leaf or self.parent.child_ids != (self.left.id, self.right.id):
            raise PartitionError(f"split of {self.parent.id}: the new parent must name both children")
        if self.left.id == self.right.id:
            raise PartitionError(f"split of {self.parent.id}: both children have id {self.left.id}")
        for c in (self.left, self.right):
            if c.id in state.partitions:
                raise PartitionError(f"split of {self.parent.id}: partition {c.id} already exists")
            if c.parent_id != self.parent.id or not c.is_leaf or c.child_ids:
                raise PartitionError(f"split of {self.parent.id}: child {c.id} must be a leaf under it")
        self._validate_regions(current)

    def _validate_regions(self, current: Partition) -> None:
        """The children must divide the parent's region at one point on its dimension."""
        d, ranges = self.parent.dimension, current.region.ranges
        bad = PartitionError(f"split of {self.parent.id}: the children do not divide its region on dimension {d}")
        if not 0 <= d < len(ranges) or len(self.left.region.ranges) != len(ranges):
            raise bad
        r = ranges[d]
        point = self.left.region.ranges[d].max
        try:
            inside = point is not None and r.min < point and (r.max is None or point < r.max)
        except TypeError:  # a point of the wrong type
            inside = False
        if (not inside or self.left.region != current.region.with_range(d, Range(r.field, r.min, point))
                or self.right.region != current.region.with_range(d, Range(r.field, point, r.max))):
            raise bad

    def apply(self, state: TableState) -> None:
        for p in (self.parent, self.left, self.right):
            state.partitions[p.id] = p

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.TYPE, "parent": self.parent.to_dict(), "left": self.left.to_dict(),
                "right": self.right.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SplitPartition:
        return cls(Partition.from_dict(d["parent"]), Partition.from_dict(d["left"]), Partition.from_dict(d["right"]))


@dataclass(frozen=True)
class AddFiles(Transaction):
    """Track new files with their references. Refused if any file is already tracked
    or any partition is missing; then nothing is added."""

    TYPE: ClassVar[str] = "add_files"
    references: tuple[FileReference, ...]
    update_time: int = field(default_factory=now_ms)

    def touches(self) -> Touches:
        return Touches(partition_ids=frozenset(r.partition_id for r in self.references),
                       filenames=frozenset(r.filename for r in self.references))

    def validate(self, state: TableState) -> None:
        seen: set[tuple[str, str]] = set()
        for r in self.references:
            _require_partition(state, r.partition_id)
            if r.filename in state.files:
                raise FileReferenceError(f"file {r.filename} is already tracked")
            if (r.filename, r.partition_id) in seen:
                raise FileReferenceError(f"file {r.filename} is referenced twice in partition {r.partition_id}")
            if r.job_id is not None:
                raise FileReferenceError(f"file {r.filename}: new references cannot carry a job id")
            if r.record_count < 0:
                raise FileReferenceError(f"file {r.filename}: negative record count")
            seen.add((r.filename, r.partition_id))

    def apply(self, state: TableState) -> None:
        for r in self.references:
            state.put_reference(replace(r, update_time=self.update_time))
            _touch_file(state, r.filename, self.update_time)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.TYPE, "update_time": self.update_time,
                "references": [r.to_dict() for r in self.references]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AddFiles:
        return cls(tuple(FileReference.from_dict(r) for r in d["references"]), d["update_time"])


@dataclass(frozen=True)
class SplitFileReference:
    """Move the reference of ``filename`` in ``from_partition`` to its children."""

    filename: str
    from_partition: str
    new_references: tuple[FileReference, ...]


@dataclass(frozen=True)
class SplitFileReferences(Transaction):
    """Push references from non-leaf partitions down one level, atomically."""

    TYPE: ClassVar[str] = "split_file_references"
    splits: tuple[SplitFileReference, ...]
    update_time: int = field(default_factory=now_ms)

    def touches(self) -> Touches:
        pids = set()
        for s in self.splits:
            pids.add(s.from_partition)
            pids.update(r.partition_id for r in s.new_references)
        return Touches(partition_ids=frozenset(pids), filenames=frozenset(s.filename for s in self.splits))

    def validate(self, state: TableState) -> None:
        for s in self.splits:
            ref = _require_reference(state, s.filename, s.from_partition)
            if ref.job_id is not None:
                raise FileReferenceError(f"file {s.filename} in partition {s.from_partition} is assigned to job {ref.job_id}")
            parent = _require_partition(state, s.from_partition)
            if not s.new_references:
                raise FileReferenceError(f"split of {s.filename} in {s.from_partition}: no new references "
                                         "(the records would be lost)")
            targets = [r.partition_id for r in s.new_references]
            if len(set(targets)) != len(targets):
                raise FileReferenceError(f"split of {s.filename}: two new references in one partition")
            for r in s.new_references:
                if r.record_count < 0:
                    raise FileReferenceError(f"split of {s.filename}: negative record count")
                if r.filename != s.filename:
                    raise FileReferenceError(f"split of {s.filename}: new reference names {r.filename}")
                if r.partition_id not in parent.child_ids:
                    raise PartitionError(f"split of {s.filename}: {r.partition_id} is not a child of {s.from_partition}")
                if (r.filename, r.partition_id) in state.references:
                    raise FileReferenceError(f"file {s.filename} already has a reference in partition {r.partition_id}")
        keys = [(s.filename, s.from_partition) for s in self.splits]
        if len(set(keys)) != len(keys):
            raise FileReferenceError("split file references: a reference is split twice")

    def apply(self, state: TableState) -> None:
        for s in self.splits:
            state.remove_reference(s.filename, s.from_partition)
            for r in s.new_references:
                state.put_reference(replace(r, job_id=None, update_time=self.update_time))
            _touch_file(state, s.filename, self.update_time)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.TYPE, "update_time": self.update_time, "splits": [
            {"filename": s.filename, "from_partition": s.from_partition,
             "new_references": [r.to_dict() for r in s.new_references]} for s in self.splits]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SplitFileReferences:
        return cls(tuple(SplitFileReference(s["filename"], s["from_partition"],
                                            tuple(FileReference.from_dict(r) for r in s["new_references"]))
                         for s in d["splits"]), d["update_time"])


@dataclass(frozen=True)
class JobAssignment:
    """Assign the references of ``filenames`` in ``partition_id`` to ``job_id``."""

    job_id: str
    partition_id: str
    filenames: tuple[str, ...]


@dataclass(frozen=True)
class AssignJobIds(Transaction):
    """Assign compaction jobs to references; refused if any already has a job."""

    TYPE: ClassVar[str] = "assign_job_ids"
    assignments: tuple[JobAssignment, ...]
    update_time: int = field(default_factory=now_ms)

    def touches(self) -> Touches:
        return Touches(partition_ids=frozenset(a.partition_id for a in self.assignments),
                       filenames=frozenset(f for a in self.assignments for f in a.filenames))

    def validate(self, state: TableState) -> None:
        seen: set[tuple[str, str]] = set()
        for a in self.assignments:
            for f in a.filenames:
                ref = _require_reference(state, f, a.partition_id)
                if ref.job_id is not None:
                    raise FileReferenceError(f"file {f} in partition {a.partition_id} is already assigned to job {ref.job_id}")
                if (f, a.partition_id) in seen:
                    raise FileReferenceError(f"file {f} in partition {a.partition_id} is assigned twice")
                seen.add((f, a.partition_id))

    def apply(self, state: TableState) -> None:
        for a in self.assignments:
            for f in a.filenames:
                ref = state.references[(f, a.partition_id)]
                state.put_reference(replace(ref, job_id=a.job_id, update_time=self.update_time))

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.TYPE, "update_time": self.update_time, "assignments": [
            {"job_id": a.job_id, "partition_id": a.partition_id, "filenames": list(a.filenames)}
            for a in self.assignments]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AssignJobIds:
        return cls(tuple(JobAssignment(a["job_id"], a["partition_id"], tuple(a["filenames"]))
                         for a in d["assignments"]), d["update_time"])


@dataclass(frozen=True)
class ReplaceFileReferences(Transaction):
    """Commit a compaction job: the inputs' references in the partition are replaced
    by one reference to the output file, atomically.

    Refused, changing nothing, if any input no longer carries ``job_id`` in the
    partition (a duplicate or stale commit) or the output file is already tracked.
    ``new_reference`` may be None when the job wrote no records.
    """

    TYPE: ClassVar[str] = "replace_file_references"
    job_id: str
    partition_id: str
    input_files: tuple[str, ...]
    new_reference: Optional[FileReference]
    update_time: int = field(default_factory=now_ms)

    def touches(self) -> Touches:
        names = set(self.input_files)
        if self.new_reference is not None:
            names.add(self.new_reference.filename)
        return Touches(partition_ids=frozenset({self.partition_id}), filenames=frozenset(names))

    def validate(self, state: TableState) -> None:
        _require_partition(state, self.partition_id)
        if len(set(self.input_files)) != len(self.input_files):
            raise FileReferenceError(f"job {self.job_id}: an input file is named twice")
        for f in self.input_files:
            ref = _require_reference(state, f, self.partition_id)
            if ref.job_id != self.job_id:
                raise FileReferenceError(
                    f"job {self.job_id}: file {f} in partition {self.partition_id} is assigned to "
                    f"{'no job' if ref.job_id is None else 'job ' + ref.job_id}")
        n = self.new_reference
        if n is not None:
            if n.partition_id != self.partition_id:
                raise FileReferenceError(f"job {self.job_id}: output reference is for partition {n.partition_id}")
            if n.record_count < 0:
                raise FileReferenceError(f"job {self.job_id}: output file {n.filename} has a negative record count")
            if n.filename in state.files:
                raise FileReferenceError(f"job {self.job_id}: output file {n.filename} is already tracked")

    def apply(self, state: TableState) -> None:
        for f in self.input_files:
            state.remove_reference(f, self.partition_id)
            _touch_file(state, f, self.update_time)
        if self.new_reference is not None:
            state.put_reference(replace(self.new_reference, job_id=None, update_time=self.update_time))
            _touch_file(state, self.new_reference.filename, self.update_time)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.TYPE, "update_time": self.update_time, "job_id": self.job_id,
                "partition_id": self.partition_id, "input_files": list(self.input_files),
                "new_reference": None if self.new_reference is None else self.new_reference.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReplaceFileReferences:
        n = d["new_reference"]
        return cls(d["job_id"], d["partition_id"], tuple(d["input_files"]),
                   None if n is None else FileReference.from_dict(n), d["update_time"])


@dataclass(frozen=True)
class DeleteFiles(Transaction):
    """Forget files that garbage collection deleted; refused if any is still referenced."""

    TYPE: ClassVar[str] = "delete_files"
    filenames: tuple[str, ...]

    def touches(self) -> Touches:
        return Touches(filenames=frozenset(self.filenames))

    def validate(self, state: TableState) -> None:
        for f in self.filenames:
            if f not in state.files:
                raise FileReferenceError(f"file {f} is not tracked")
            if state.reference_count(f):
                raise FileReferenceError(f"file {f} is still referenced by {state.reference_count(f)} partitions")

    def apply(self, state: TableState) -> None:
        for f in self.filenames:
            state.files.pop(f, None)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.TYPE, "filenames": list(self.filenames)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeleteFiles:
        return cls(tuple(d["filenames"]))


@dataclass(frozen=True)
class ClearFiles(Transaction):
    """Forget every file and reference of the table (partitions stay)."""

    TYPE: ClassVar[str] = "clear_files"

    def touches(self) -> Touches:
        return Touches(whole_table=True)

    def validate(self, state: TableState) -> None:
        return None

    def apply(self, state: TableState) -> None:
        state.references.clear()
        state.refs_by_file.clear()
        state.files.clear()

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.TYPE}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClearFiles:
        return cls()


TRANSACTION_TYPES: dict[str, Any] = {
    t.TYPE: t for t in (InitialisePartitions, SplitPartition, AddFiles, SplitFileReferences,
                        AssignJobIds, ReplaceFileReferences, DeleteFiles, ClearFiles)
}


def transaction_to_dict(txn: Transaction) -> dict[str, Any]:
    return txn.to_dict()


def transaction_from_dict(d: dict[str, Any]) -> Transaction:
    try:
        cls = TRANSACTION_TYPES[d["type"]]
    except KeyError as e:
        raise TransactionError(f"unknown transaction type {d.get('type')!r}") from e
    return cls.from_dict(d)
