"""What a commit records besides its data (``StateStore.commit``'s ``commit_id``, ``job``,
``ingest_job_id``, ``buffer_seqs`` and ``client_write``), shared by the backends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from statestore.client_writes import ClientWrite
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
    #: the client's idempotency key and request digest, kept in the commit's own atomic step
    #: (its ``seq``: the transaction's :meth:`~statestore.transactions.base.Transaction.number_in`)
    client_write: Optional[ClientWrite] = None
