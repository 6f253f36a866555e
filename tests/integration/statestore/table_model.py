"""A plain-Python model of one table's state for test_model_based: dicts and tuples,
written from the transaction rules in DESIGN.md, sharing no code with ``statestore``
(no TableState, no ``Transaction.validate``/``apply``), so a bug there cannot hide in
both the backend and the model.

Partitions split one LongType key: a region is ``(lo, hi)``, ``hi`` None for unbounded.
Each operation returns the error class the store must refuse with (``"file"`` for a
FileReferenceError, ``"partition"`` for a PartitionError) and changes nothing, or
applies itself and returns None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

Refusal = Optional[str]  # "file", "partition" or None (accepted)


@dataclass(frozen=True)
class Part:
    parent: Optional[str]
    children: tuple[str, ...]
    leaf: bool
    lo: Any
    hi: Any


@dataclass(frozen=True)
class Ref:
    records: int
    approximate: bool
    whole: bool
    job: Optional[str]
    updated: int


@dataclass
class TableModel:
    parts: dict[str, Part]
    refs: dict[tuple[str, str], Ref] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)  # filename -> update time

    def referenced(self, filename: str) -> int:
        return sum(1 for f, _ in self.refs if f == filename)

    # ----- the five transactions the test drives --------------------------------------
    def add_files(self, refs: list[tuple[str, str, int, bool, bool, Optional[str]]], when: int) -> Refusal:
        seen = set()
        for name, pid, records, _, _, job in refs:
            if pid not in self.parts:
                return "partition"
            if name in self.files or (name, pid) in seen or job is not None or records < 0:
                return "file"
            seen.add((name, pid))
        for name, pid, records, approximate, whole, _ in refs:
            self.refs[(name, pid)] = Ref(records, approximate, whole, None, when)
            self.files[name] = when
        return None

    def split_partition(self, pid: str, point: int, left: str, right: str) -> Refusal:
        p = self.parts.get(pid)
        if p is None or not p.leaf or left == right or left in self.parts or right in self.parts:
            return "partition"
        if not (p.lo < point and (p.hi is None or point < p.hi)):
            return "partition"
        self.parts[pid] = Part(p.parent, (left, right), False, p.lo, p.hi)
        self.parts[left] = Part(pid, (), True, p.lo, point)
        self.parts[right] = Part(pid, (), True, point, p.hi)
        return None

    def split_references(self, splits: list[tuple[str, str, list[tuple[str, int]]]], when: int) -> Refusal:
        """``splits``: (filename, from partition, [(to partition, records)])."""
        for name, src, new in splits:
            ref = self.refs.get((name, src))
            if ref is None or ref.job is not None:
                return "file"
            if src not in self.parts:
                return "partition"
            targets = [t for t, _ in new]
            if not new or len(set(targets)) != len(targets):
                return "file"
            for target, records in new:
                if records < 0:
                    return "file"
                if target not in self.parts[src].children:
                    return "partition"
                if (name, target) in self.refs:
                    return "file"
        if len({(n, s) for n, s, _ in splits}) != len(splits):
            return "file"
        for name, src, new in splits:
            del self.refs[(name, src)]
            for target, records in new:
                self.refs[(name, target)] = Ref(records, True, False, None, when)
            self.files[name] = when
        return None

    def assign(self, assignments: list[tuple[str, str, list[str]]], when: int) -> Refusal:
        """``assignments``: (job id, partition, filenames)."""
        seen = set()
        for _, pid, names in assignments:
            for name in names:
                ref = self.refs.get((name, pid))
                if ref is None or ref.job is not None or (name, pid) in seen:
                    return "file"
                seen.add((name, pid))
        for job, pid, names in assignments:
            for name in names:
                old = self.refs[(name, pid)]
                self.refs[(name, pid)] = Ref(old.records, old.approximate, old.whole, job, when)
        return None

    def replace(self, job: str, pid: str, inputs: list[str], output: Optional[tuple[str, str, int]],
                when: int) -> Refusal:
        """Commit a compaction: ``output`` is (filename, partition, records) or None."""
        if pid not in self.parts:
            return "partition"
        if len(set(inputs)) != len(inputs):
            return "file"
        for name in inputs:
            ref = self.refs.get((name, pid))
            if ref is None or ref.job != job:
                return "file"
        if output is not None and (output[1] != pid or output[2] < 0 or output[0] in self.files):
            return "file"
        for name in inputs:
            del self.refs[(name, pid)]
            self.files[name] = when
        if output is not None:
            self.refs[(output[0], pid)] = Ref(output[2], False, True, None, when)
            self.files[output[0]] = when
        return None

    def delete(self, names: list[str]) -> Refusal:
        if any(n not in self.files or self.referenced(n) for n in names):
            return "file"
        for n in names:
            self.files.pop(n, None)
        return None

    # ----- what the store must show -------------------------------------------------------
    def unreferenced_before(self, now: int) -> list[str]:
        return sorted(n for n, t in self.files.items() if not self.referenced(n) and t < now)

    def plain(self) -> tuple[Any, ...]:
        return (dict(self.parts), dict(self.refs), dict(self.files))


def plain_state(state: Any) -> tuple[Any, ...]:
    """A backend's TableState in the model's terms."""
    parts = {p.id: Part(p.parent_id, tuple(p.child_ids), p.is_leaf, p.region.ranges[0].min, p.region.ranges[0].max)
             for p in state.partitions.values()}
    refs = {(r.filename, r.partition_id): Ref(r.record_count, r.count_approximate, r.whole_file, r.job_id,
                                              r.update_time)
            for r in state.references.values()}
    files = {f.filename: f.update_time for f in state.files.values()}
    return (parts, refs, files)
