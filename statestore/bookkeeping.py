"""What a commit records besides its data (``StateStore.commit``'s ``commit_id``, ``job``
and ``ingest_job_id``), shared by the backends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from statestore.jobs import JobRecord


@dataclass(frozen=True)
class Bookkeeping:
    """What a commit records besides its data (see ``StateStore.commit``).
    ``check_id``: look the id up first (a caller's id, or a retry after a lost reply;
    a fresh id of a first try cannot have been applied)."""

    commit_id: str
    job: Optional[JobRecord] = None
    ingest_job_id: Optional[str] = None
    check_id: bool = True
    #: write-buffer entries the commit removes (a flush's), all still buffered or refused
    buffer_seqs: tuple[int, ...] = ()
