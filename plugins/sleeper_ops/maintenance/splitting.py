"""Partition splitting: leaf partitions over the table's threshold split in two at the
median of their data, found from the files' sketch sidecars without reading data.

A leaf partition splits when its references hold more records than
``sleeper.table.partition.splitting.threshold`` (approximate counts included). The
split point is the median of the partition's data on the first row key field where
``min < median < max`` (min and max of the data inside the partition); the files'
sketches are merged and restricted to the partition's range on that field, so a file
referenced from several partitions (its sketch covers the whole file) counts only with
its part inside this partition. A partition with no such field (e.g. one key value
throughout) does not split and the report says why.

Each split is one :class:`~statestore.transactions.SplitPartition` commit, atomic and
refused by the state store if the parent is no longer a leaf or has changed; a refused
split is reported and the others carry on. No data is rewritten: the references stay
on the parent until compaction pushes them down, so a partition splits at most one
level per run. Every split is recorded as a job of kind ``split`` (created, started,
finished, then committed or failed with the reason). Offline tables are skipped.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from sleeper_ops.engine.separators import separator
from sleeper_ops.errors import StorageError
from sleeper_ops.heartbeat import Heartbeat
from sleeper_ops.io.datafile import read_sketches
from sleeper_ops.io.sketches import RowKeySketches, merged_field_sketch, range_quantiles
from sleeper_ops.io.storage import ObjectStore
from statestore.catalog import TableInfo
from statestore.errors import PartitionError
from statestore.files import FileReference
from statestore.jobs import JobRecord
from statestore.partitions import Partition, split_children
from statestore.properties import PARTITION_SPLITTING_THRESHOLD
from statestore.state import TableState
from statestore.store import StateStore
from statestore.transactions import SplitPartition


@dataclass(frozen=True)
class PartitionSplit:
    """One committed split: ``parent_id`` now has children ``child_ids`` (left, right),
    divided at ``value`` on row key field ``field`` (left ``< value <=`` right)."""

    parent_id: str
    child_ids: tuple[str, str]
    field: str
    value: Any
    records: int
    job_id: str


@dataclass
class SplitReport:
    """What one run of :func:`split_partitions` did.

    Attributes:
        table: the table's name.
        splits: the splits committed.
        refused: ``(partition id, reason)`` of splits the state store refused (e.g. the
            partition was split concurrently); nothing changed for those.
        unsplittable: ``(partition id, reason)`` of partitions over the threshold that
            could not be split (no row key field with ``min < median < max``, or
            unreadable sketches).
        skipped_reason: why the whole table was skipped (offline), else None.
        leaves, largest, threshold: the leaf partitions looked at, the records the
            largest of them holds, and the table's splitting threshold.
    """

    table: str
    splits: list[PartitionSplit] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    unsplittable: list[tuple[str, str]] = field(default_factory=list)
    skipped_reason: Optional[str] = None
    #: what the run looked at: the leaf partitions, the records of the largest, the threshold
    leaves: int = 0
    largest: int = 0
    threshold: int = 0

    def summary(self) -> str:
        """One line, for the CLI and the DAG's log; a run with no partition over the
        threshold says what it looked at and the threshold."""
        if self.skipped_reason:
            return f"{self.table}: skipped ({self.skipped_reason})"
        if not (self.splits or self.refused or self.unsplittable):
            return (f"{self.table}: nothing to split: {self.leaves:,} lea{'f' if self.leaves == 1 else 'ves'}, "
                    f"the largest holding {self.largest:,} records; a leaf splits once it holds more than "
                    f"{self.threshold:,} ({PARTITION_SPLITTING_THRESHOLD})")
        n = len(self.splits)
        parts = [f"{self.table}: split {n} partition{'' if n == 1 else 's'}"]
        if self.refused:
            parts.append(f"{len(self.refused)} refused")
        if self.unsplittable:
            parts.append(f"{len(self.unsplittable)} over the threshold could not be split")
        return ", ".join(parts)


@dataclass(frozen=True)
class SplitCandidate:
    """A leaf partition over the threshold and its references."""

    partition: Partition
    references: tuple[FileReference, ...]

    @property
    def records(self) -> int:
        return sum(r.record_count for r in self.references)


@dataclass(frozen=True)
class SplitPoint:
    """Where to split a partition: ``value`` on row key dimension ``dimension``."""

    dimension: int
    field: str
    value: Any


Progress = Callable[[str, str], None]  # (partition id, "split" | "refused" | "unsplittable")


def find_candidates(state: TableState, threshold: int) -> list[SplitCandidate]:
    """Leaf partitions whose references hold more than ``threshold`` records, largest first."""
    refs: dict[str, list[FileReference]] = {}
    for r in state.references.values():
        refs.setdefault(r.partition_id, []).append(r)
    out = [SplitCandidate(p, tuple(sorted(refs.get(p.id, ()), key=lambda r: r.filename)))
           for p in state.partitions.values() if p.is_leaf]
    out = [c for c in out if c.records > threshold]
    out.sort(key=lambda c: (-c.records, c.partition.id))
    return out


def choose_split_point(partition: Partition, sketches: Sequence[RowKeySketches]) -> SplitPoint | str:
    """The split point of ``partition`` from its files' sketches, or why there is none.

    Tries the row key fields in order and takes the first where the median of the data
    inside the partition lies strictly between its min and max; splits there, or, for
    string and bytes keys, at the shortest prefix of the median above the value just
    below it (the same records each side, and no whole key kept in the partition tree
    where a prefix separates).
    """
    reasons = []
    for d, rng in enumerate(partition.region.ranges):
        if not sketches:
            break
        key_type = sketches[0].fields[rng.field].key_type
        merged = merged_field_sketch(key_type, (s.fields[rng.field] for s in sketches))
        q = range_quantiles(merged, rng.min, rng.max)
        if q is None:
            reasons.append(f"{rng.field}: no values inside the partition")
            continue
        if q.min < q.median < q.max:  # not a record's key where a shorter value separates (engine.separators)
            return SplitPoint(d, rng.field, separator(q.below_median, q.median))
        reasons.append(f"{rng.field}: min {q.min!r}, median {q.median!r}, max {q.max!r}")
    if not reasons:
        return "no file sketches"
    return "no row key field has min < median < max (" + "; ".join(reasons) + ")"


def split_partition(state_store: StateStore, table: TableInfo, partition: Partition, point: SplitPoint, *,
                    records: int = 0, input_files: int = 0, run_id: Optional[str] = None) -> PartitionSplit:
    """Split ``partition`` (as the caller last saw it) at ``point``, in one commit, and
    record the job.

    Raises:
        PartitionError: the state store refused the split (the partition is no longer
            a leaf or has changed) or the point is outside it; the job is recorded as
            failed with the reason and nothing changed.
    """
    job = JobRecord.created(table.table_id, uuid.uuid4().hex, "split", partition_id=partition.id,
                            input_files=input_files)
    state_store.put_job(job)
    job = job.started(run_id)
    state_store.put_job(job)
    try:
        with Heartbeat(state_store, table, [job.job_id]):
            parent, left, right = split_children(partition, point.dimension, point.value)
            job = job.finished(rows_read=0, rows_written=0)
            state_store.put_job(job)
            state_store.commit(table.table_id, SplitPartition(parent, left, right))
    except BaseException as e:
        state_store.put_job(job.failed(str(e) or type(e).__name__))
        raise
    state_store.put_job(job.committed())
    return PartitionSplit(partition.id, (left.id, right.id), point.field, point.value, records, job.job_id)


def split_partitions(state_store: StateStore, objects: ObjectStore, table: TableInfo, *,
                     run_id: Optional[str] = None, progress: Optional[Progress] = None,
                     threads: int = 4) -> SplitReport:
    """Split every leaf partition of ``table`` over its splitting threshold, once.

    Reads the current state, then each candidate's sketch sidecars (``threads`` at a
    time), and commits one split per partition. Refused splits and partitions that
    cannot be split are reported, not raised; other errors (e.g. the state store
    unreachable) propagate after the splits already committed. ``progress`` is called
    with ``(partition id, outcome)`` after each candidate.
    """
    report = SplitReport(table.name)
    if not table.online:
        report.skipped_reason = f"table {table.name} is offline"
        return report
    state = state_store.load_state(table.table_id)
    report.threshold = table.get_int(PARTITION_SPLITTING_THRESHOLD)
    candidates = find_candidates(state, report.threshold)
    leaf_records: dict[str, int] = {p.id: 0 for p in state.partitions.values() if p.is_leaf}
    for r in state.references.values():
        if r.partition_id in leaf_records:
            leaf_records[r.partition_id] += r.record_count
    report.leaves, report.largest = len(leaf_records), max(leaf_records.values(), default=0)
    sketch_cache: dict[str, RowKeySketches] = {}

    def note(pid: str, outcome: str) -> None:
        if progress is not None:
            progress(pid, outcome)

    for c in candidates:
        pid = c.partition.id
        try:
            sketches = _load_sketches(objects, table, [r.filename for r in c.references], sketch_cache, threads)
        except (StorageError, ValueError) as e:  # missing or corrupt sidecar
            report.unsplittable.append((pid, f"cannot read sketches: {e}"))
            note(pid, "unsplittable")
            continue
        point = choose_split_point(c.partition, sketches)
        if isinstance(point, str):
            report.unsplittable.append((pid, point))
            note(pid, "unsplittable")
            continue
        try:
            done = split_partition(state_store, table, c.partition, point, records=c.records,
                                   input_files=len(c.references), run_id=run_id)
        except PartitionError as e:
            report.refused.append((pid, str(e)))
            note(pid, "refused")
            continue
        report.splits.append(done)
        note(pid, "split")
    return report


def _load_sketches(objects: ObjectStore, table: TableInfo, filenames: list[str],
                   cache: dict[str, RowKeySketches], threads: int) -> list[RowKeySketches]:
    """The sketches of ``filenames`` (a state-store filename is its object key), cached
    by name for the run since sibling partitions may share files."""
    missing = [f for f in filenames if f not in cache]

    def read(name: str) -> RowKeySketches:
        return read_sketches(objects, table.schema, name)

    if len(missing) > 1 and threads > 1:
        with ThreadPoolExecutor(max_workers=min(threads, len(missing))) as pool:
            for name, sk in zip(missing, pool.map(read, missing)):
                cache[name] = sk
    else:
        for name in missing:
            cache[name] = read(name)
    return [cache[f] for f in filenames]
