"""One ingest's job record, saved before any input is read and naming its outputs
before they are written (DESIGN.md section 10: the orphan sweep keeps every file a
started job names, however long the ingest takes)."""

from __future__ import annotations

import uuid
from typing import Optional, Sequence

from sleeper_ops.io.datafile import new_data_key
from statestore.catalog import TableInfo
from statestore.jobs import JobRecord
from statestore.store import StateStore


class IngestAttempt:
    """One ingest's job record, with the outputs it names before writing them."""

    def __init__(self, state_store: StateStore, table: TableInfo, job: Optional[JobRecord],
                 run_id: Optional[str]) -> None:
        self.state_store, self.table = state_store, table
        self.given = job is not None
        self.record = job if job is not None else JobRecord.created(table.table_id, uuid.uuid4().hex, "ingest")
        self.saved = False
        if self.record.status != "started":  # saved before any input is read (the batcher saved its own)
            self.record = self.record.started(run_id)
            self.state_store.put_job(self.record)
            self.saved = True

    def new_keys(self, leaf_ids: Sequence[str]) -> list[str]:
        """Fresh keys for ``leaf_ids``' files, named in the job's record (saved) before
        anything is written under them."""
        keys = [new_data_key(self.table.table_id, leaf) for leaf in leaf_ids]
        if keys:
            self.record = self.record.naming(keys)
            self.state_store.put_job(self.record)
            self.saved = True
        return keys

    def fail(self, reason: str) -> None:
        """Record the failure, if the record was saved; a lost store is not an error here
        (the record then stays started, and the sweep treats it as abandoned later)."""
        if not (self.saved or self.given):
            return
        try:
            self.state_store.put_job(self.record.failed(reason))
        except Exception:  # the original error is the one to raise
            pass
