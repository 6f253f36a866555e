"""Age-off on a clock: garbage collection drops files whose records have all expired.

With the age-off iterator set (``sleeper.table.iterator.ageoff`` = ``FIELD:MAX_AGE_MS``),
every read hides a record once its ``FIELD`` falls below ``now - MAX_AGE_MS``, but only
compaction removes it, and compaction runs only when new files arrive. So each
garbage collection run (:func:`sleeper_ops.maintenance.gc.collect_garbage`: the GC DAG
and ``sleeper gc``) calls :func:`drop_expired_files` first:

* every file reference not assigned to a compaction job whose file has expired whole
  (:attr:`~sleeper_ops.engine.ageoff_expiry.Expiry.whole`: exact, from the Parquet
  statistics of ``FIELD``, the file is never read) is dropped, all in ONE
  :class:`~statestore.transactions.DropFileReferences` commit, with no rewrite;
* the files then await garbage collection like compaction inputs (deleted after
  ``sleeper.table.gc.delay.minutes``, so a query that planned on them still reads them).

Reads give the same answers before and after: the records dropped are those every
read already hid. Files only partly expired are compaction's (a job once more than
``sleeper.table.ageoff.rewrite.fraction`` of their records expired: see
:mod:`sleeper_ops.compaction.jobs`). A commit refused because a compaction job took a
reference meanwhile is tried again on the new state (that job drops its records).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sleeper_ops.engine.ageoff_expiry import cutoff_ms, file_expiry, table_ageoff
from sleeper_ops.io.storage import ObjectStore
from statestore.catalog import TableInfo
from statestore.errors import TransactionError
from statestore.roles import TableCommits
from statestore.transactions import DropFileReferences

ATTEMPTS = 3


@dataclass
class AgeOffDrop:
    """What :func:`drop_expired_files` dropped (or, in a dry run, would drop)."""

    files: list[str] = field(default_factory=list)
    references: int = 0
    records: int = 0
    commits: int = 0


def drop_expired_files(state_store: TableCommits, objects: ObjectStore, table: TableInfo, now_ms: int, *,
                       dry_run: bool = False) -> AgeOffDrop:
    """Drop the references of files wholly expired at ``now_ms`` (see the module docstring)."""
    ageoff = table_ageoff(table)
    out = AgeOffDrop()
    if ageoff is None:
        return out
    cutoff = cutoff_ms(ageoff, now_ms)
    whole: dict[str, bool] = {}
    for attempt in range(ATTEMPTS):
        state = state_store.load_state(table.table_id)
        drop = []
        records = 0
        for ref in state.references.values():
            if ref.job_id is not None:
                continue
            if ref.filename not in whole:
                whole[ref.filename] = file_expiry(objects, ref.filename, ageoff, cutoff).whole
            if whole[ref.filename]:
                drop.append((ref.filename, ref.partition_id))
                records += ref.record_count
        if not drop:
            return out
        out.files = sorted({f for f, _ in drop})
        out.references, out.records = len(drop), records
        if dry_run:
            return out
        try:
            state_store.commit(table.table_id, DropFileReferences(tuple(sorted(drop)), now_ms))
        except TransactionError:
            if attempt == ATTEMPTS - 1:
                raise
            continue
        out.commits = 1
        return out
    return out  # pragma: no cover - the loop returns or raises
