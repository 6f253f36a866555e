"""The state of one table: partitions, file references and file records.

:class:`TableState` is the model every backend must agree with. Transactions
validate against it and apply to it; the in-memory backend keeps one per table and
the PostgreSQL backend loads the fragment a transaction touches into one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from statestore.deletes import Tombstone
from statestore.files import FileRecord, FileReference, FileStatus
from statestore.partitions import Partition, PartitionTree


@dataclass
class TableState:
    """Mutable table state. Values are frozen, so shallow copies make snapshots.

    Invariant: every reference's filename has a record in ``files``; ``refs_by_file``
    indexes ``references`` by filename. Only :meth:`put_references` (and
    :meth:`put_reference`), :meth:`remove_reference` and :meth:`clear_references` write
    those two dicts, so the index cannot drift from the references
    (``tests/unit/statestore/test_state_invariant.py`` checks that no other module does).
    """

    partitions: dict[str, Partition] = field(default_factory=dict)
    references: dict[tuple[str, str], FileReference] = field(default_factory=dict)
    files: dict[str, FileRecord] = field(default_factory=dict)
    refs_by_file: dict[str, set[str]] = field(default_factory=dict)
    #: live tombstones by number, and the last number given (:mod:`statestore.deletes`)
    tombstones: dict[int, Tombstone] = field(default_factory=dict)
    delete_count: int = 0

    @classmethod
    def of(cls, partitions: Iterable[Partition] = (), references: Iterable[FileReference] = (),
           files: Iterable[FileRecord] = ()) -> TableState:
        s = cls()
        for p in partitions:
            s.partitions[p.id] = p
        for f in files:
            s.files[f.filename] = f
        for r in references:
            s.put_reference(r)
        return s

    def copy(self) -> TableState:
        return TableState(dict(self.partitions), dict(self.references), dict(self.files),
                          {k: set(v) for k, v in self.refs_by_file.items()}, dict(self.tombstones), self.delete_count)

    # ----- mutation used by transactions --------------------------------------------
    def put_reference(self, ref: FileReference) -> None:
        """Add or replace one reference (see :meth:`put_references`)."""
        self.put_references((ref,))

    def put_references(self, refs: Iterable[FileReference]) -> None:
        """Add or replace each of ``refs`` in ``references`` and index it in
        ``refs_by_file``: the one place that writes both (every loader and transaction
        adds references through it). The caller keeps the other half of the invariant:
        each reference's file has a record in ``files``."""
        references, by_file = self.references, self.refs_by_file
        for ref in refs:
            references[(ref.filename, ref.partition_id)] = ref
            parts = by_file.get(ref.filename)
            if parts is None:
                by_file[ref.filename] = {ref.partition_id}
            else:
                parts.add(ref.partition_id)

    def remove_reference(self, filename: str, partition_id: str) -> None:
        del self.references[(filename, partition_id)]
        parts = self.refs_by_file[filename]
        parts.discard(partition_id)
        if not parts:
            del self.refs_by_file[filename]

    def clear_references(self) -> None:
        """Forget every reference (files, partitions and tombstones stay)."""
        self.references.clear()
        self.refs_by_file.clear()

    def clear_files(self) -> None:
        """Forget every file and reference (partitions and tombstones stay)."""
        self.clear_references()
        self.files.clear()

    def reference_count(self, filename: str) -> int:
        return len(self.refs_by_file.get(filename, ()))

    # ----- views --------------------------------------------------------------------
    def tree(self) -> PartitionTree:
        return PartitionTree(self.partitions.values())

    def file_statuses(self) -> list[FileStatus]:
        out = []
        for name, rec in sorted(self.files.items()):
            refs = tuple(self.references[(name, p)] for p in sorted(self.refs_by_file.get(name, ())))
            out.append(FileStatus(name, rec.update_time, refs))
        return out

    def canonical(self) -> tuple:
        """A comparable form of the whole state, for tests that compare backends."""
        return (
            sorted((p.to_dict()["id"], repr(p)) for p in self.partitions.values()),
            sorted(repr(r) for r in self.references.values()),
            sorted(repr(f) for f in self.files.values()),
            sorted(repr(t) for t in self.tombstones.values()), self.delete_count,
        )
