"""Transactions on file references: add files, push references down, assign
compaction jobs, replace references (the compaction commit), delete and clear files."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, Optional

from statestore.codec import as_records
from statestore.errors import FileReferenceError, PartitionError
from statestore.files import FileReference
from statestore.state import TableState
from statestore.transactions.base import (
    Touches,
    Transaction,
    now_ms,
    require_partition,
    require_reference,
    touch_file,
)


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
            require_partition(state, r.partition_id)
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
            touch_file(state, r.filename, self.update_time)


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
            ref = require_reference(state, s.filename, s.from_partition)
            if ref.job_id is not None:
                raise FileReferenceError(
                    f"file {s.filename} in partition {s.from_partition} is assigned to job {ref.job_id}")
            parent = require_partition(state, s.from_partition)
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
                    raise PartitionError(
                        f"split of {s.filename}: {r.partition_id} is not a child of {s.from_partition}")
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
            touch_file(state, s.filename, self.update_time)


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
                ref = require_reference(state, f, a.partition_id)
                if ref.job_id is not None:
                    raise FileReferenceError(
                        f"file {f} in partition {a.partition_id} is already assigned to job {ref.job_id}")
                if (f, a.partition_id) in seen:
                    raise FileReferenceError(f"file {f} in partition {a.partition_id} is assigned twice")
                seen.add((f, a.partition_id))

    def apply(self, state: TableState) -> None:
        for a in self.assignments:
            for f in a.filenames:
                ref = state.references[(f, a.partition_id)]
                state.put_reference(replace(ref, job_id=a.job_id, update_time=self.update_time))


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
        require_partition(state, self.partition_id)
        if len(set(self.input_files)) != len(self.input_files):
            raise FileReferenceError(f"job {self.job_id}: an input file is named twice")
        for f in self.input_files:
            ref = require_reference(state, f, self.partition_id)
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
            touch_file(state, f, self.update_time)
        if self.new_reference is not None:
            state.put_reference(replace(self.new_reference, job_id=None, update_time=self.update_time))
            touch_file(state, self.new_reference.filename, self.update_time)


@dataclass(frozen=True)
class DropFileReferences(Transaction):
    """Drop references whose records no read would return any more (every record of
    the file has aged off), without rewriting anything: each ``(filename,
    partition_id)`` reference is removed, and a file left with none awaits garbage
    collection like a compaction input.

    Refused, changing nothing, if any reference no longer exists or is assigned to a
    compaction job (that job will drop the records itself)."""

    TYPE: ClassVar[str] = "drop_file_references"
    references: tuple[tuple[str, str], ...] = field(metadata=as_records("filename", "partition_id"))
    update_time: int = field(default_factory=now_ms)

    def touches(self) -> Touches:
        return Touches(partition_ids=frozenset(p for _, p in self.references),
                       filenames=frozenset(f for f, _ in self.references))

    def validate(self, state: TableState) -> None:
        if len(set(self.references)) != len(self.references):
            raise FileReferenceError("a reference to drop is named twice")
        for f, pid in self.references:
            require_partition(state, pid)
            ref = require_reference(state, f, pid)
            if ref.job_id is not None:
                raise FileReferenceError(f"file {f} in partition {pid} is assigned to job {ref.job_id}")

    def apply(self, state: TableState) -> None:
        for f, pid in self.references:
            state.remove_reference(f, pid)
            touch_file(state, f, self.update_time)


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


@dataclass(frozen=True)
class ClearFiles(Transaction):
    """Forget every file and reference of the table (partitions stay)."""

    TYPE: ClassVar[str] = "clear_files"

    def touches(self) -> Touches:
        return Touches(whole_table=True)

    def validate(self, state: TableState) -> None:
        return None

    def apply(self, state: TableState) -> None:
        state.clear_files()
