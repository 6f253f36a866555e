"""Garbage collection: delete data files nothing references any more, and orphans.

:func:`collect_garbage` deletes files that the state store tracks with no references
(replaced by compaction) once unchanged for longer than
``sleeper.table.gc.delay.minutes`` plus ``sleeper.table.history.retention.minutes``
(:func:`keep_unreferenced_ms`), so queries that planned against the old files can still
read them, and every state within the history retention can be read as of
(:mod:`statestore.history`): a file is unreferenced only from the state after the one
that last referenced it. The orphan sweep never touches a tracked file, so it keeps
those files too. Files go in batches of
``sleeper.table.gc.batch.size``: first the batch's objects (each data file and its
``.sketches`` sidecar; an object already gone is fine), then one
:class:`~statestore.transactions.DeleteFiles` commit. A crash between the two leaves
tracked, unreferenced files whose objects are (partly) gone; the next run deletes
them again and commits. A referenced file is never deleted: only unreferenced files
are listed, a file never gains a reference once it has none, and ``DeleteFiles`` is
refused for a file that is still referenced.

:func:`sweep_orphans` deletes objects under the table's data prefix that the state
store does not track (written by a job that failed before its commit, or whose GC
commit never happened after the file was forgotten), once older than
``sleeper.table.gc.orphan.grace.minutes`` -- except objects that a job not yet
committed or failed names in its record (every job names its outputs before writing
them), unless that job has shown no progress for ``sleeper.table.gc.job.abandon.minutes``.
A named output covers the keys its task attempts write (:mod:`sleeper_ops.io.attempts`:
a Spark task may run twice, each attempt writing a key of its own). So a slow job's
output is never swept before its commit, however long the job runs within that limit;
and a commit checks its outputs exist before committing. Scratch files of an attempt
(:func:`scratch_root`: bulk import's sorted runs, left behind by a killed driver) are
swept by the same rules, once no job in flight names that attempt.

Age-off on a clock: with the age-off iterator set, a run first drops the references of
files whose records have all expired (:mod:`sleeper_ops.maintenance.ageoff`: one
commit, no rewrite); they are then deleted like any unreferenced file, after the delay.

A run that deletes also forgets delete tombstones that no longer cover any row
(:func:`~sleeper_ops.maintenance.deletes.drop_spent_tombstones`), commit ids older than
:data:`~statestore.store.COMMIT_ID_RETENTION_MS`, and the idempotency keys of client
writes older than ``sleeper.table.write.idempotency.hours``
(:mod:`statestore.client_writes`).

With the orphan sweep, a run also sweeps the state store's own blobs
(:meth:`~statestore.store.StateStore.sweep_blobs`: on DynamoDB, buffered bytes, large
transaction bodies, snapshots and job records that no item names, left by a write whose
outcome was unknown or a delete that failed) once older than the same grace.

Offline tables are skipped. ``dry_run=True`` lists what would be deleted and changes
nothing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional

from sleeper_ops.io.attempts import named_key
from sleeper_ops.io.datafile import sketch_key
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.maintenance.ageoff import drop_expired_files
from sleeper_ops.maintenance.deletes import drop_spent_tombstones
from statestore import clock
from statestore.catalog import TableInfo
from statestore.errors import SleeperError, TransactionError
from statestore.history import retention_ms
from statestore.properties import (
    GC_BATCH_SIZE,
    GC_DELAY_MINUTES,
    GC_JOB_ABANDON_MINUTES,
    GC_ORPHAN_GRACE_MINUTES,
    HISTORY_RETENTION_MINUTES,
    WRITE_IDEMPOTENCY_HOURS,
)
from statestore.roles import TableCommits
from statestore.store import COMMIT_ID_RETENTION_MS, StateStore
from statestore.transactions import DeleteFiles

_DRY_RUN_LIMIT = 2**62  # list every unreferenced file in one go when nothing is deleted

Progress = Callable[[int], None]  # called with the number of files (or orphans) just deleted


@dataclass
class GCReport:
    """What one run of :func:`collect_garbage` did (or, with ``dry_run``, would do).

    Attributes:
        table: the table's name.
        deleted: files deleted and forgotten by the state store.
        orphans_deleted: untracked objects deleted by the orphan sweep.
        blobs_deleted: the state store's blobs that none of its items named, deleted
            with the orphan sweep (:meth:`~statestore.store.StateStore.sweep_blobs`).
        dry_run: nothing was changed; the lists say what would have been deleted.
        skipped_reason: why the table was skipped (offline), else None.
        commits: ``DeleteFiles`` commits made.
        refused: ``(file, reason)`` of files whose ``DeleteFiles`` the state store
            refused (e.g. already forgotten by a concurrent run); their objects are gone.
        tombstones_dropped: numbers of the delete tombstones forgotten because nothing
            they cover holds rows any more (:mod:`sleeper_ops.maintenance.deletes`).
        aged_off: files whose records had all aged off, their references dropped
            (:mod:`sleeper_ops.maintenance.ageoff`); ``aged_off_records`` their records.
    """

    table: str
    deleted: list[str] = field(default_factory=list)
    orphans_deleted: list[str] = field(default_factory=list)
    blobs_deleted: list[str] = field(default_factory=list)
    dry_run: bool = False
    skipped_reason: Optional[str] = None
    commits: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)
    waiting: Optional[Waiting] = None
    tombstones_dropped: list[int] = field(default_factory=list)
    aged_off: list[str] = field(default_factory=list)
    aged_off_records: int = 0

    def summary(self) -> str:
        """What was (or would be) deleted, then what waits and when the next is due (when
        the run was asked to ``explain``)."""
        if self.skipped_reason:
            return f"{self.table}: skipped ({self.skipped_reason})"
        verb = "would delete" if self.dry_run else "deleted"
        out = (f"{self.table}: {verb} {_files(len(self.deleted), 'unreferenced file')}"
               f" and {_files(len(self.orphans_deleted), 'orphan object')}")
        if self.blobs_deleted:
            out += f", {_files(len(self.blobs_deleted), 'state store blob')} nothing named"
        if self.refused:
            out += f", {len(self.refused)} refused by the state store"
        if self.tombstones_dropped:
            out += f", dropped {len(self.tombstones_dropped)} spent delete tombstones"
        if self.aged_off:
            out += (f", {'would drop' if self.dry_run else 'dropped'} {_files(len(self.aged_off), 'file')} "
                    f"whose {self.aged_off_records} records had all aged off")
        if self.waiting is not None:
            if not (self.deleted or self.orphans_deleted or self.blobs_deleted or self.refused
                    or self.tombstones_dropped or self.aged_off) and self.waiting.idle:
                return f"{self.table}: nothing to delete: {self.waiting.nothing_reason()}"
            out += self.waiting.describe()
        return out


@dataclass(frozen=True)
class Waiting:
    """What garbage collection keeps for now: unreferenced files younger than the GC delay
    and untracked objects younger than the orphan grace, with when the first of each
    becomes due (ms since the epoch) and the time judged at."""

    now_ms: int
    delay_minutes: int
    grace_minutes: int
    files: int = 0
    files_due_ms: Optional[int] = None
    orphans: int = 0
    orphans_due_ms: Optional[int] = None
    retention_minutes: int = 0
    #: the files the state store tracks (referenced ones included)
    tracked: int = 0

    @property
    def idle(self) -> bool:
        """Nothing waits: no unreferenced file and no untracked object is too young."""
        return not (self.files or self.orphans)

    def nothing_reason(self) -> str:
        """Why a run that deleted nothing had nothing to delete, when :attr:`idle`: what it
        looked at, and when it would delete (naming the two properties)."""
        held = f"{_files(self.tracked, 'file')}{', all referenced,' if self.tracked else ''}"
        kept = (f"{GC_DELAY_MINUTES} {self.delay_minutes} + {HISTORY_RETENTION_MINUTES} {self.retention_minutes}"
                if self.retention_minutes else GC_DELAY_MINUTES)
        return (f"the table has {held} and nothing untracked (a file goes {self.delay_minutes + self.retention_minutes}"
                f" min after losing its last reference, {kept}; an untracked object after {self.grace_minutes} min, "
                f"{GC_ORPHAN_GRACE_MINUTES})")

    def _retention(self) -> str:
        return f" and {self.retention_minutes}-minute history retention" if self.retention_minutes else ""

    def describe(self) -> str:
        """``""`` when nothing waits, else ``"; 21 unreferenced files wait out the
        15-minute delay (the first is due in 4 min 10 s)"`` and the same for orphans."""
        out = ""
        if self.files:
            out += (f"; {_files(self.files, 'unreferenced file')} {_wait(self.files)} out the "
                    f"{self.delay_minutes}-minute GC delay{self._retention()} (the first is due in "
                    f"{_duration(self.files_due_ms, self.now_ms)})")
        if self.orphans:
            out += (f"; {_files(self.orphans, 'untracked object')} {_wait(self.orphans)} out the "
                    f"{self.grace_minutes}-minute orphan grace (the first is due in "
                    f"{_duration(self.orphans_due_ms, self.now_ms)})")
        return out


def _files(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _wait(n: int) -> str:
    return "waits" if n == 1 else "wait"


def _duration(due_ms: Optional[int], now_ms: int) -> str:
    seconds = max(0, ((due_ms or now_ms) - now_ms + 999) // 1000)
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def keep_unreferenced_ms(table: TableInfo) -> int:
    """How long a file stays after losing its last reference: the table's history
    retention (every state within it may be read as of, :mod:`statestore.history`; a
    file unreferenced for longer is in none of them) plus the GC delay (a read planned
    just inside the retention, or against the current state, may still be reading it)."""
    return table.get_int(GC_DELAY_MINUTES) * 60_000 + retention_ms(table)


def waiting(state_store: StateStore, objects: ObjectStore, table: TableInfo, now_ms: int) -> Waiting:
    """What GC of ``table`` at ``now_ms`` keeps only because it is too young (see
    :class:`Waiting`). Reads the table's whole state and lists its data prefix once more:
    the CLI and the GC DAG ask for it (``explain``), so both say why they waited."""
    grace = table.get_int(GC_ORPHAN_GRACE_MINUTES)
    state = state_store.load_state(table.table_id)
    referenced = {r.filename for r in state.references.values()}
    keep = keep_unreferenced_ms(table)
    young = [f.update_time for name, f in state.files.items()
             if name not in referenced and f.update_time >= now_ms - keep]
    cutoff = now_ms - grace * 60_000
    in_flight = state_store.in_flight_outputs(table.table_id, now_ms - table.get_int(GC_JOB_ABANDON_MINUTES) * 60_000)
    untracked = [o.mtime_ms for o in objects.list(data_prefix(table.table_id))
                 if o.mtime_ms >= cutoff and _data_key_of(o.key) not in state.files
                 and _data_key_of(o.key) not in in_flight]
    return Waiting(now_ms, table.get_int(GC_DELAY_MINUTES), grace, len(young), min(young) + keep if young else None,
                   len(untracked), min(untracked) + grace * 60_000 if untracked else None,
                   retention_ms(table) // 60_000, len(state.files))



def _delete_objects(objects: ObjectStore, keys: list[str], threads: int) -> None:
    """Delete ``keys`` (missing ones are fine); the first failure is raised after all ran."""
    if threads <= 1 or len(keys) <= 1:
        for k in keys:
            objects.delete(k)
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(keys))) as pool:
        for _ in pool.map(objects.delete, keys):
            pass


def collect_garbage(state_store: StateStore, objects: ObjectStore, table: TableInfo, *, dry_run: bool = False,
                    now_ms: Optional[int] = None, orphans: bool = True, progress: Optional[Progress] = None,
                    threads: int = 8, explain: bool = False) -> GCReport:
    """Delete ``table``'s unreferenced files older than its GC delay, then (``orphans``)
    sweep orphan objects. See the module docstring for the guarantees. ``explain`` adds
    what waits to the report (:func:`waiting`: one more read of the whole state).

    Args:
        now_ms: the current time in milliseconds since the epoch (tests); default now.
        progress: called with the number of files deleted after each batch.
        threads: objects deleted in parallel.

    Raises:
        SleeperError: the state store or the object store failed; the batches committed
            so far stay committed and the next run finishes the rest.
    """
    report = GCReport(table.name, dry_run=dry_run)
    if not table.online:
        report.skipped_reason = f"table {table.name} is offline"
        return report
    now = clock.now_ms() if now_ms is None else now_ms
    aged = drop_expired_files(state_store, objects, table, now, dry_run=dry_run)
    report.aged_off, report.aged_off_records = aged.files, aged.records
    before = now - keep_unreferenced_ms(table)
    batch_size = table.get_int(GC_BATCH_SIZE)
    if dry_run:
        report.deleted = state_store.unreferenced_files(table.table_id, before, limit=_DRY_RUN_LIMIT)
    else:
        # first, so that a commit of this run that fails cannot keep old commit ids and the group
        # commit's old requests and verdicts from being pruned
        state_store.prune_commit_ids(table.table_id, now - COMMIT_ID_RETENTION_MS)
        seen: set[str] = set()
        while True:
            batch = [f for f in state_store.unreferenced_files(table.table_id, before, limit=batch_size)
                     if f not in seen]
            if not batch:
                break
            seen.update(batch)
            _delete_objects(objects, [k for f in batch for k in (f, sketch_key(f))], threads)
            _forget(state_store, table, batch, report)
            if progress is not None:
                progress(len(batch))
        state_store.prune_client_writes(table.table_id, now - table.get_int(WRITE_IDEMPOTENCY_HOURS) * 3_600_000)
        report.tombstones_dropped = drop_spent_tombstones(state_store, table, now)
        # after this run's own commits, so a drop already past the retention takes its keys out of the history
        state_store.prune_history(table.table_id, now)
    if orphans:
        report.orphans_deleted = sweep_orphans(state_store, objects, table, dry_run=dry_run, now_ms=now,
                                               progress=progress, threads=threads)
        report.blobs_deleted = state_store.sweep_blobs(
            table.table_id, older_than_ms=now - table.get_int(GC_ORPHAN_GRACE_MINUTES) * 60_000, dry_run=dry_run)
    if explain:
        report.waiting = waiting(state_store, objects, table, now)
    return report


def _forget(state_store: TableCommits, table: TableInfo, batch: list[str], report: GCReport) -> None:
    """Commit ``DeleteFiles`` for a batch whose objects are gone. If the state store
    refuses the batch, commit file by file so one refused file holds up no other."""
    try:
        state_store.commit(table.table_id, DeleteFiles(tuple(batch)))
        report.commits += 1
        report.deleted.extend(batch)
        return
    except TransactionError:
        pass
    for f in batch:
        try:
            state_store.commit(table.table_id, DeleteFiles((f,)))
        except TransactionError as e:
            report.refused.append((f, str(e)))
            continue
        report.commits += 1
        report.deleted.append(f)


def data_prefix(table_id: str) -> str:
    """The prefix under which every data file of a table is written (see ``new_data_key``)."""
    return f"{table_id}/data/"


def scratch_root(table_id: str) -> str:
    """Where jobs keep intermediate files per attempt (bulk import's sorted runs):
    ``<root>/<attempt tag>/...``, the attempt's outputs being ``.../<attempt tag>.parquet``."""
    return f"{table_id}/bulk-import-runs"


def _data_key_of(key: str) -> str:
    """The data file an object belongs to: itself, or the ``.parquet`` of a sidecar."""
    if key.endswith(".sketches"):
        return key[: -len(".sketches")] + ".parquet"
    return key


def sweep_orphans(state_store: StateStore, objects: ObjectStore, table: TableInfo, *,
                  grace_minutes: Optional[int] = None, dry_run: bool = False, now_ms: Optional[int] = None,
                  progress: Optional[Progress] = None, threads: int = 8) -> list[str]:
    """Delete objects under ``table``'s data prefix that the state store does not track
    and that are older than the grace period; return their keys (with ``dry_run``, the
    keys that would be deleted). A sidecar counts as tracked when its data file is.

    The objects are listed first, then the outputs named by jobs in flight, then the
    tracked files: a commit during the sweep (which makes its output tracked and its
    job final in one step) is seen one way or the other. Objects whose modification
    time the store does not give are kept. Offline tables are skipped (an empty list).

    Args:
        grace_minutes: overrides ``sleeper.table.gc.orphan.grace.minutes``.
        now_ms: the current time in milliseconds since the epoch (tests); default now.
        progress: called with the number of orphans deleted.
    """
    if not table.online:
        return []
    now = clock.now_ms() if now_ms is None else now_ms
    grace = table.get_int(GC_ORPHAN_GRACE_MINUTES) if grace_minutes is None else grace_minutes
    if grace < 0:
        raise SleeperError(f"orphan grace period must not be negative, got {grace} minutes")
    cutoff = now - grace * 60_000
    listed = [o for o in objects.list(data_prefix(table.table_id)) if 0 < o.mtime_ms < cutoff]
    scratch = [o for o in objects.list(scratch_root(table.table_id)) if 0 < o.mtime_ms < cutoff]
    if not listed and not scratch:
        return []
    in_flight = state_store.in_flight_outputs(table.table_id, now - table.get_int(GC_JOB_ABANDON_MINUTES) * 60_000)
    tracked = state_store.load_state(table.table_id).files
    orphans = sorted(o.key for o in listed if _data_key_of(o.key) not in tracked
                     and _data_key_of(o.key) not in in_flight and named_key(_data_key_of(o.key)) not in in_flight)
    # scratch of an attempt (``<root>/<attempt tag>/...``) is an orphan once no job in flight
    # names an output of that attempt (``.../<attempt tag>.parquet``)
    live_tags = {k.rsplit("/", 1)[-1].removesuffix(".parquet") for k in in_flight}
    root = scratch_root(table.table_id) + "/"
    orphans += sorted(o.key for o in scratch if o.key[len(root):].split("/", 1)[0] not in live_tags)
    if orphans and not dry_run:
        _delete_objects(objects, orphans, threads)
        if progress is not None:
            progress(len(orphans))
    return orphans
