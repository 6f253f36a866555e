"""Ingest requests: files queued for the ingest batcher, kept in the state store database.

An :class:`IngestRequest` is one file (a path or ``s3://`` URI) to ingest into one
table. It moves ``pending -> assigned -> ingested``; a job that fails puts its
requests back to ``pending`` (``attempts`` + 1, ``last_error`` set) so they stay
visible and are retried, or to ``failed`` once a caller-given attempt limit is
reached. The store guarantees (see :class:`statestore.store.StateStore`):

* adding requests is atomic: all of them are queued, or none;
* assigning requests to a job is atomic and conditional on every one of them still
  being pending, so two batchers racing for the same requests never both get them;
* finishing a job changes only the requests still assigned to that job.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any, Optional

from statestore.clock import now_ms
from statestore.codec import Record
from statestore.errors import SleeperError

INGEST_REQUEST_STATUSES = ("pending", "assigned", "ingested", "failed")


class IngestRequestError(SleeperError):
    """Ingest requests are malformed (e.g. a duplicate request id or the wrong table)."""



@dataclass(frozen=True)
class IngestRequest(Record):
    """One file queued for ingest into one table.

    Attributes:
        request_id: unique within the table.
        table_id: the table the file goes into.
        filename: an absolute local path or an ``s3://`` URI.
        size_bytes: the file's size when the request was made (for batching).
        received_ms: when the request was made, ms since the epoch (for max age).
        status: one of :data:`INGEST_REQUEST_STATUSES`.
        job_id: the ingest job the request is (or was last) assigned to.
        attempts: how many jobs holding the request have failed.
        last_error: why the last job holding the request failed.
    """

    CODEC_STRICT = True  # an unknown key is refused, as it always was

    request_id: str
    table_id: str
    filename: str
    size_bytes: int
    received_ms: int
    status: str = "pending"
    job_id: Optional[str] = None
    attempts: int = 0
    last_error: Optional[str] = None

    def __post_init__(self) -> None:
        if self.status not in INGEST_REQUEST_STATUSES:
            raise ValueError(f"unknown ingest request status {self.status!r}")
        if self.size_bytes < 0:
            raise ValueError(f"ingest request for {self.filename}: size {self.size_bytes} is negative")

    @classmethod
    def new(cls, table_id: str, filename: str, size_bytes: int, received_ms: Optional[int] = None) -> IngestRequest:
        """A pending request with a fresh id, received now unless ``received_ms`` is given."""
        return cls(uuid.uuid4().hex, table_id, filename, size_bytes,
                   now_ms() if received_ms is None else received_ms)

    # Transitions, as the backends apply them (pure; used by the in-memory store).
    def assigned(self, job_id: str) -> IngestRequest:
        return replace(self, status="assigned", job_id=job_id)

    def finished(self, ok: bool, error: Optional[str] = None, max_attempts: Optional[int] = None,
                 counted: bool = True) -> IngestRequest:
        """The request after its job ended: ``ingested``, or back to ``pending`` with one
        more attempt (``failed`` once ``attempts`` reaches ``max_attempts``); not
        ``counted``: back to ``pending`` with its attempts as they were."""
        if ok:
            return replace(self, status="ingested")
        attempts = self.attempts + (1 if counted else 0)
        if counted and max_attempts is not None and attempts >= max_attempts:
            return replace(self, status="failed", attempts=attempts, last_error=error)
        return replace(self, status="pending", job_id=None, attempts=attempts, last_error=error)


def check_new_requests(table_id: str, requests: Any) -> list[IngestRequest]:
    """``requests`` as a list, refusing (IngestRequestError) ones for another table, not
    pending, or with a request id given twice."""
    out = list(requests)
    seen: set[str] = set()
    for r in out:
        if r.table_id != table_id:
            raise IngestRequestError(f"ingest request {r.request_id} is for table {r.table_id}, not {table_id}")
        if r.status != "pending" or r.job_id is not None:
            raise IngestRequestError(f"ingest request {r.request_id} must be new and pending, not {r.status}")
        if r.request_id in seen:
            raise IngestRequestError(f"ingest request id {r.request_id} is given twice")
        seen.add(r.request_id)
    return out
