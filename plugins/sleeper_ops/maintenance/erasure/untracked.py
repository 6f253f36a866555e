"""Objects under a table's prefixes that the state store does not track, for the proof
of erasure: every object under the data prefix whose data file is not tracked, and every
bulk import scratch run (:func:`~sleeper_ops.maintenance.gc.scratch_root`).

Each is decoded (:mod:`sleeper_ops.maintenance.erasure.decode`) and, when it holds
matching rows or cannot be decoded, listed as what it is and when it goes:

* **output of an unfinished job**: a job not yet committed or failed names it (or the
  key it is an attempt of): it is committed (then it is a data file, purged like any
  other) or, once the job ends or shows no progress for
  ``sleeper.table.gc.job.abandon.minutes``, swept as an orphan;
* **losing attempt**: a Spark task attempt's key (``<stem>.attempt-<id>.<ext>``,
  :mod:`sleeper_ops.io.attempts`) that was not committed;
* **scratch run**: a bulk import attempt's sorted run (Arrow IPC);
* **sketch sidecar**: the ``.sketches`` of an untracked data file (sampled key values);
* **untracked object**: anything else (an output kept after an unknown commit outcome
  or a killed worker, a file forgotten by a GC commit whose delete never happened).

All but the first go with the orphan sweep, once older than
``sleeper.table.gc.orphan.grace.minutes`` (:func:`~sleeper_ops.maintenance.gc.sweep_orphans`).
A sidecar of a *tracked* file is not listed: it samples only that file's keys, so it
holds a key only while its file holds the record, and garbage collection deletes it
with its file.
"""

from __future__ import annotations

from typing import Optional, Sequence

from sleeper_ops.io.attempts import named_key
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.maintenance.erasure.decode import SKETCH_SUFFIX, CannotTell, matching_rows
from sleeper_ops.maintenance.erasure.report import ErasureReport, HeldObject, iso
from sleeper_ops.maintenance.gc import data_prefix, scratch_root
from statestore.catalog import TableInfo
from statestore.deletes import Tombstone
from statestore.jobs import JobRecord
from statestore.properties import GC_JOB_ABANDON_MINUTES, GC_ORPHAN_GRACE_MINUTES
from statestore.region import Region
from statestore.roles import JobTracker
from statestore.state import TableState

_OPEN = ("created", "started", "finished")


def _data_key_of(key: str) -> str:
    return key[: -len(SKETCH_SUFFIX)] + ".parquet" if key.endswith(SKETCH_SUFFIX) else key


def check_untracked(state_store: JobTracker, objects: ObjectStore, table: TableInfo, state: TableState,
                    regions: Sequence[Region], probe: Tombstone, report: ErasureReport, now_ms: int) -> None:
    """Add the untracked objects of ``table`` that hold matching rows, or cannot be
    decoded (see the module docstring). ``state`` was read before the listing: an
    object committed in between is listed here too (a false alarm, never a miss)."""
    grace = table.get_int(GC_ORPHAN_GRACE_MINUTES)
    abandon = table.get_int(GC_JOB_ABANDON_MINUTES)
    open_jobs: dict[str, JobRecord] = {}
    for record in state_store.list_jobs(table.table_id, limit=None):
        if record.status in _OPEN:
            for named in record.outputs:
                open_jobs[named] = record
    listed = [(o, False) for o in objects.list(data_prefix(table.table_id))
              if _data_key_of(o.key) not in state.files]
    listed += [(o, True) for o in objects.list(scratch_root(table.table_id))]
    root = scratch_root(table.table_id) + "/"
    for o, scratch in listed:
        report.untracked_checked += 1
        rows: Optional[int]
        try:
            rows = matching_rows(objects, o.key, table.schema, regions, probe)
        except CannotTell:
            rows = None
        if rows == 0:
            continue
        sweep_ms = max(o.mtime_ms + grace * 60_000, now_ms)
        swept = f"with the orphan sweep after the {grace}-minute grace (from {iso(sweep_ms)})"
        data_key = _data_key_of(o.key)
        job: Optional[JobRecord] = open_jobs.get(data_key) or open_jobs.get(named_key(data_key))
        if scratch:
            tag = o.key[len(root):].split("/", 1)[0]
            job = next((j for k, j in open_jobs.items() if k.rsplit("/", 1)[-1].removesuffix(".parquet") == tag),
                       None)
        if job is not None:
            last = max(x for x in (job.created_ms, job.started_ms, job.finished_ms, job.heartbeat_ms) if x)
            kind = "scratch run" if scratch else "output of an unfinished job"
            goes = (f"when {job.kind} job {job.job_id} commits it (then purged like any file) or ends; swept if "
                    f"the job shows no progress for {abandon} minutes (from {iso(last + abandon * 60_000)})")
            report.held.append(HeldObject(kind, objects.uri_of(o.key), rows, goes=goes,
                                          goes_ms=last + abandon * 60_000))
            continue
        if scratch:
            kind = "scratch run"
        elif o.key.endswith(SKETCH_SUFFIX):
            kind = "sketch sidecar"
        elif named_key(o.key) != o.key:
            kind = "losing attempt"
        else:
            kind = "untracked object"
        report.held.append(HeldObject(kind, objects.uri_of(o.key), rows, goes=swept, goes_ms=sweep_ms))
