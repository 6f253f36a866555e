"""Compaction job creation: push references down, plan jobs, assign them.

One call of :func:`create_compaction_jobs` on an online table:

1. pushes every unassigned reference in a non-leaf partition down one level (one
   :class:`SplitFileReferences` commit; the children's counts are estimates, half
   each), so data of split partitions reaches the leaves over successive runs;
2. finds jobs to retry: references still assigned to a job whose status record is
   missing, failed, or has not moved for ``sleeper.table.compaction.job.retry.minutes``
   (its runner died). Re-running a job is always safe: its commit only succeeds while
   the inputs still carry its id, so at most one attempt's output is ever referenced;
3. runs the table's strategy (:mod:`sleeper_ops.compaction.strategy`) on each leaf
   partition's unassigned references, records each new job as ``created``, then
   assigns all of them in ONE :class:`AssignJobIds` commit before any job runs. If
   that commit is refused (a concurrent creator took some files) nothing is assigned,
   the records are marked failed and planning is retried on fresh state.

Jobs are plain data (:class:`CompactionJob`), serialisable to JSON for Spark.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from sleeper_ops.compaction.strategy import plan_groups, strategy_name, why_no_job
from sleeper_ops.engine.ageoff_expiry import cutoff_ms, expired_fraction_over, table_ageoff
from sleeper_ops.io.storage import ObjectStore
from statestore.catalog import TableInfo
from statestore.clock import now_ms
from statestore.codec import Record
from statestore.deletes import Tombstone
from statestore.errors import TransactionError
from statestore.files import FileReference
from statestore.jobs import JobRecord
from statestore.properties import AGEOFF_REWRITE_FRACTION, COMPACTION_JOB_RETRY_MINUTES, DELETE_PURGE_HOURS
from statestore.roles import JobTracker, TableCommits
from statestore.state import TableState
from statestore.store import StateStore
from statestore.transactions import AssignJobIds, JobAssignment, SplitFileReference, SplitFileReferences


@dataclass(frozen=True)
class CompactionJob(Record):
    """Merge ``inputs`` (their references in ``partition_id``) into one file.

    ``whole_files``: every input reference covers its whole file, so the merge
    needs no partition filter. ``input_records`` is the sum of the references'
    record counts, exact when ``exact_count`` (then the merge must read exactly
    that many records, a check against lost input).

    Deletes (:mod:`statestore.deletes`): ``delete_horizon`` is the table's delete count
    when the job was made, ``tombstones`` (as dicts) the live tombstones then, and
    ``input_horizons`` each input's horizon: the merge drops, from each input, the rows
    of the tombstones numbered above its horizon, and the output gets
    ``delete_horizon``. A job some tombstone applies to has no exact count.
    """

    table_id: str
    job_id: str
    partition_id: str
    inputs: tuple[str, ...]
    whole_files: bool = True
    input_records: int = 0
    exact_count: bool = False
    delete_horizon: int = 0
    input_horizons: tuple[int, ...] = ()
    tombstones: tuple[dict[str, Any], ...] = ()

    def input_tombstones(self) -> list[tuple[Tombstone, ...]]:
        """For each input, the tombstones its rows must be dropped by."""
        live = [Tombstone.from_dict(t) for t in self.tombstones]
        horizons = self.input_horizons or (0,) * len(self.inputs)
        return [tuple(t for t in live if t.covers_file(h)) for h in horizons]

    @classmethod
    def of(cls, table_id: str, job_id: str, partition_id: str, refs: list[FileReference],
           state: Optional[TableState] = None) -> CompactionJob:
        """The job of ``refs``; with ``state``, carrying the tombstones that apply to them."""
        refs = sorted(refs, key=lambda r: r.filename)
        count, live = (0, []) if state is None else (state.delete_count, sorted(
            state.tombstones.values(), key=lambda t: t.number))
        applying = [t for t in live if any(t.covers_file(r.delete_horizon) for r in refs)]
        return cls(table_id, job_id, partition_id, tuple(r.filename for r in refs),
                   all(r.whole_file for r in refs), sum(r.record_count for r in refs),
                   all(r.whole_file and not r.count_approximate for r in refs) and not applying,
                   count, tuple(r.delete_horizon for r in refs), tuple(t.to_dict() for t in applying))


@dataclass
class JobCreation:
    """What one job-creation run did."""

    table: str
    jobs: list[CompactionJob] = field(default_factory=list)
    new: int = 0
    retried: int = 0
    pushed_down: int = 0
    skipped_reason: Optional[str] = None
    #: leaf partition id -> why it got no new job (leaves holding no file are left out)
    waiting: dict[str, str] = field(default_factory=dict)
    #: what the run looked at: the leaf partitions, the file references in them
    leaves: int = 0
    files: int = 0
    #: the table's strategy (:func:`~sleeper_ops.compaction.strategy.strategy_name`)
    strategy: str = ""

    @property
    def nothing_to_do(self) -> bool:
        """True when the run made, retried and pushed down nothing (and was not skipped)."""
        return not (self.skipped_reason or self.jobs or self.pushed_down)

    def nothing_reason(self) -> str:
        """``nothing to compact: 0 files in 1 leaf (...)``: what the run looked at and why
        it made no job, one line (the leaves' own reasons are :meth:`waiting_lines`)."""
        looked = f"{_count(self.files, 'file')} in {_count(self.leaves, 'leaf', 'leaves')}"
        why = (f"a job needs 2 files or more in one leaf, strategy {self.strategy}" if not self.waiting
               else "each leaf holding files says why below")
        return f"nothing to compact: {looked} ({why})"

    def summary(self) -> str:
        if self.skipped_reason:
            return f"{self.table}: skipped ({self.skipped_reason})"
        if self.nothing_to_do:
            return "\n".join([f"{self.table}: 0 new compaction jobs: {self.nothing_reason()}", *self.waiting_lines()])
        return "\n".join([f"{self.table}: {self.new} new compaction jobs, {self.retried} retried, "
                          f"{self.pushed_down} references pushed down", *self.waiting_lines()])

    def waiting_lines(self, most: int = 10) -> list[str]:
        """``  leaf P: why`` for the first ``most`` leaves in :attr:`waiting`, then a count of the rest."""
        waiting = sorted(self.waiting.items())
        lines = [f"  leaf {pid}: {why}" for pid, why in waiting[:most]]
        if len(waiting) > most:
            lines.append(f"  ... and {len(waiting) - most} more leaves with files but no job")
        return lines


def _count(n: int, noun: str, plural: str = "") -> str:
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def push_down(state_store: TableCommits, table: TableInfo, state: TableState) -> int:
    """Move unassigned references of non-leaf partitions one level down; returns how many."""
    splits = []
    for ref in sorted(state.references.values(), key=lambda r: (r.partition_id, r.filename)):
        p = state.partitions[ref.partition_id]
        if p.is_leaf or ref.job_id is not None:
            continue
        half = ref.record_count // 2
        children = [FileReference(ref.filename, c, half if i == 0 else ref.record_count - half,
                                  count_approximate=True, whole_file=False, delete_horizon=ref.delete_horizon)
                    for i, c in enumerate(p.child_ids)]
        splits.append(SplitFileReference(ref.filename, ref.partition_id, tuple(children)))
    if splits:
        state_store.commit(table.table_id, SplitFileReferences(tuple(splits)))
    return len(splits)


def stale_jobs(state_store: JobTracker, table: TableInfo, state: TableState, *,
               now: int, retry_after_ms: int) -> list[CompactionJob]:
    """Jobs whose inputs are still assigned but whose runner looks dead or failed."""
    by_job: dict[str, list[FileReference]] = {}
    for ref in state.references.values():
        if ref.job_id is not None:
            by_job.setdefault(ref.job_id, []).append(ref)
    out = []
    for job_id, refs in sorted(by_job.items()):
        rec = state_store.get_job(table.table_id, job_id)
        if rec is None or rec.status == "failed" or now - rec.last_update_ms >= retry_after_ms:
            out.append(CompactionJob.of(table.table_id, job_id, refs[0].partition_id, refs, state))
    return out


def create_compaction_jobs(state_store: StateStore, table: TableInfo, *, run_id: Optional[str] = None,
                           now: Optional[int] = None, retry_after_minutes: Optional[float] = None,
                           attempts: int = 3, objects: Optional[ObjectStore] = None) -> JobCreation:
    """Push down, find stale jobs to retry, plan and assign new jobs (see the module doc).
    With ``objects`` and the age-off iterator set, a leaf file of which more than
    ``sleeper.table.ageoff.rewrite.fraction`` of the records have expired gets a job
    even when the strategy would wait (:func:`aged_files`)."""
    result = JobCreation(table.name)
    if not table.online:
        result.skipped_reason = "table is offline"
        return result
    now = now_ms() if now is None else now
    if retry_after_minutes is None:
        retry_after_minutes = table.get_int(COMPACTION_JOB_RETRY_MINUTES)
    state = state_store.load_state(table.table_id)
    result.pushed_down = push_down(state_store, table, state)
    for attempt in range(attempts):
        if result.pushed_down or attempt:
            state = state_store.load_state(table.table_id)
        retried = stale_jobs(state_store, table, state, now=now, retry_after_ms=int(retry_after_minutes * 60_000))
        planned, result.waiting = _plan(table, state, now, aged_files(objects, table, state, now))
        result.leaves = sum(1 for p in state.partitions.values() if p.is_leaf)
        result.files = sum(1 for r in state.references.values() if state.partitions[r.partition_id].is_leaf)
        result.strategy = strategy_name(table)
        records = [JobRecord.created(table.table_id, j.job_id, "compaction", partition_id=j.partition_id,
                                     input_files=len(j.inputs), run_id=run_id) for j in planned]
        for rec in records:
            state_store.put_job(rec)
        try:
            if planned:
                state_store.commit(table.table_id, AssignJobIds(tuple(
                    JobAssignment(j.job_id, j.partition_id, j.inputs) for j in planned)))
        except TransactionError as e:
            for rec in records:
                state_store.put_job(rec.failed(f"job assignment refused: {e}"))
            if attempt == attempts - 1:
                raise
            continue
        result.jobs = retried + planned
        result.new, result.retried = len(planned), len(retried)
        return result
    return result  # pragma: no cover - the loop returns or raises


def _holds_overdue_deletes(state: TableState, ref: FileReference, before_ms: int) -> bool:
    """Whether a tombstone made before ``before_ms`` covers ``ref``'s file and may meet its
    records: those of its partition, or, for a reference to part of a file (after a
    split), of any range, since the file may still hold records of ranges whose
    references were already rewritten; it lives, and holds them, until this reference
    is rewritten too."""
    region = state.partitions[ref.partition_id].region
    return any(t.covers_file(ref.delete_horizon) and t.created_ms <= before_ms
               and (not ref.whole_file or any(r.overlaps(region) for r in t.regions))
               for t in state.tombstones.values())


def aged_files(objects: Optional[ObjectStore], table: TableInfo, state: TableState, now: int) -> frozenset[str]:
    """The unassigned leaf files of which more than ``sleeper.table.ageoff.rewrite.fraction``
    of the records have expired at ``now`` (exact: :func:`expired_fraction_over`); none
    without ``objects`` or an age-off iterator."""
    ageoff = table_ageoff(table) if objects is not None else None
    if ageoff is None or objects is None:
        return frozenset()
    fraction, cutoff = float(table.get(AGEOFF_REWRITE_FRACTION) or 0.5), cutoff_ms(ageoff, now)
    names = {r.filename for r in state.references.values()
             if r.job_id is None and state.partitions[r.partition_id].is_leaf}
    return frozenset(n for n in names if expired_fraction_over(objects, n, ageoff, cutoff, fraction))


def _plan(table: TableInfo, state: TableState, now: Optional[int] = None,
          aged: frozenset[str] = frozenset()) -> tuple[list[CompactionJob], dict[str, str]]:
    """New jobs of every leaf, and why each leaf holding files but getting no job waits;
    a leaf holding a file with records deleted longer than ``sleeper.table.delete.purge.hours``
    ago, or one of the ``aged`` files, gets a job of those files even when the strategy would wait."""
    unassigned: dict[str, list[FileReference]] = {}
    assigned: dict[str, int] = {}
    for ref in state.references.values():
        if state.partitions[ref.partition_id].is_leaf:
            if ref.job_id is None:
                unassigned.setdefault(ref.partition_id, []).append(ref)
            else:
                assigned[ref.partition_id] = assigned.get(ref.partition_id, 0) + 1
    jobs, waiting = [], {}
    purge_before = (now_ms() if now is None else now) - table.get_int(DELETE_PURGE_HOURS) * 3_600_000
    for pid in sorted(set(unassigned) | set(assigned)):
        groups = plan_groups(table, unassigned.get(pid, []), assigned.get(pid, 0))
        grouped = {r.filename for g in groups for r in g}
        overdue = [r for r in unassigned.get(pid, []) if r.filename not in grouped
                   and (r.filename in aged or _holds_overdue_deletes(state, r, purge_before))]
        if overdue:
            groups = [*groups, overdue]
        for group in groups:
            jobs.append(CompactionJob.of(table.table_id, uuid.uuid4().hex, pid, group, state))
        if not groups:
            waiting[pid] = why_no_job(table, unassigned.get(pid, []), assigned.get(pid, 0))
    return jobs, waiting
